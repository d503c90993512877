// The epoch order (a permutation, a pure function of the seed and the epoch) and how a step's
// global batch is cut into shards and among workers, with and without elastic mode.
#include "trainer/data/epoch_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace tj::data {
namespace {

TEST(EpochOrderTest, PurePermutationOfSeedAndEpoch) {
  auto a = EpochOrder(1, 1, 1000), b = EpochOrder(1, 1, 1000), c = EpochOrder(1, 2, 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<uint32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
}

// The order itself is part of every backup: a run resumed by another release (or at another
// worker count) must visit the images the run it resumes would have. Pinned.
TEST(EpochOrderTest, TheOrderOfASeedAndAnEpochNeverChanges) {
  const auto first = EpochOrder(42, 1, 60000), second = EpochOrder(42, 2, 60000);
  EXPECT_EQ(std::vector<uint32_t>(first.begin(), first.begin() + 5),
            (std::vector<uint32_t>{50024, 2707, 55517, 12901, 53086}));
  EXPECT_EQ(first.back(), 21359u);
  EXPECT_EQ(std::vector<uint32_t>(second.begin(), second.begin() + 5),
            (std::vector<uint32_t>{54448, 38840, 14247, 35438, 45335}));
  EXPECT_EQ(second.back(), 37076u);
}

TEST(EpochOrderTest, ShardPlanSlices) {
  ShardPlan plan{.batch_per_shard = 32, .shards = 2, .replicas = 2, .rank = 1};
  EXPECT_EQ(plan.GlobalBatch(), 64);
  EXPECT_EQ(plan.ShardsPerReplica(), 1);
  EXPECT_EQ(plan.StepsPerEpoch(60000), 937);
  EXPECT_EQ(plan.SliceStart(0), 32);
  EXPECT_EQ(plan.SliceStart(3), 3 * 64 + 32);
  plan.steps_cap = 10;
  EXPECT_EQ(plan.StepsPerEpoch(60000), 10);
}

// Every image of a step's global batch belongs to exactly one shard, every shard to exactly
// one worker, at every worker count that divides the shard count; and shard k of step t is
// the same images at every worker count.
TEST(EpochOrderTest, ElasticShardsCoverEachStepOnceAtEveryWorkerCount) {
  constexpr int kShards = 12, kBatch = 5, kSteps = 4;
  for (int replicas : {1, 2, 3, 4, 6, 12}) {
    SCOPED_TRACE(replicas);
    std::vector<int> seen(kShards * kBatch * kSteps, 0);
    for (int rank = 0; rank < replicas; ++rank) {
      ShardPlan plan{
          .batch_per_shard = kBatch, .shards = kShards, .replicas = replicas, .rank = rank};
      ASSERT_EQ(plan.GlobalBatch(), kShards * kBatch);
      ASSERT_EQ(plan.ShardsPerReplica() * replicas, kShards);
      for (int step = 0; step < kSteps; ++step) {
        // This worker's shards are contiguous from its slice on, in shard order.
        for (int i = 0; i < plan.ShardsPerReplica(); ++i) {
          const int shard = rank * plan.ShardsPerReplica() + i;
          const int64_t start = plan.ShardStart(step, shard);
          EXPECT_EQ(start, plan.SliceStart(step) + int64_t{i} * kBatch);
          EXPECT_EQ(start, int64_t{step} * kShards * kBatch + int64_t{shard} * kBatch);
          for (int64_t row = start; row < start + kBatch; ++row) ++seen[row];
        }
      }
    }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "image " << i;
  }
}

// The global batch, and so the steps per epoch, depend on the shards alone.
TEST(EpochOrderTest, ElasticStepsPerEpochDoNotDependOnTheWorkerCount) {
  for (int replicas : {1, 2, 4}) {
    ShardPlan plan{.batch_per_shard = 64, .shards = 4, .replicas = replicas};
    EXPECT_EQ(plan.GlobalBatch(), 256);
    EXPECT_EQ(plan.StepsPerEpoch(60000), 234);
  }
}

TEST(EpochOrderTest, ShardLayoutErrorNamesTheWorkerCountsThatDivide) {
  EXPECT_EQ(ShardLayoutError(4, 1), "");
  EXPECT_EQ(ShardLayoutError(4, 2), "");
  EXPECT_EQ(ShardLayoutError(4, 4), "");
  EXPECT_EQ(ShardLayoutError(6, 3), "");
  const std::string e = ShardLayoutError(4, 3);
  EXPECT_NE(e.find("4 elastic shards cannot be split among 3 workers"), std::string::npos) << e;
  EXPECT_NE(e.find("(1, 2, 4)"), std::string::npos) << e;
  EXPECT_NE(ShardLayoutError(2, 4), "");
}

}  // namespace
}  // namespace tj::data
