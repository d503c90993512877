// Elastic mode through the real training loop in one process: the replicas are threads, the
// all-reduce is the real ring over loopback TCP, the data synthetic. The weights are bitwise
// the same at every worker count that divides the shard count, and the same as a run without
// elastic mode at one worker per shard; a run stopped mid-epoch resumes at another worker
// count and ends with the uninterrupted weights; what cannot resume exactly is refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/forwarding_backend.h"
#include "tests/support/loopback_ring.h"
#include "tests/support/synthetic_dataset.h"
#include "tests/support/temp_dir.h"
#include "trainer/train/training_loop.h"

namespace tj::train {
namespace {

using std::chrono::milliseconds;
using tj::testing::ReadAll;
using tj::testing::TempDir;

// The trainer's collective over a ring of this process: the ring carries everything.
class RingCommunicator final : public collective::Communicator {
 public:
  explicit RingCommunicator(collective::RingAllReduce* ring) : ring_(ring) {}
  int rank() const override { return ring_->rank(); }
  int size() const override { return ring_->size(); }
  Status AllReduceSum(float* data, size_t count) override {
    return ring_->Sum(data, count, Deadline());
  }
  Status AllReduceShardsSum(float* const* shards, int shards_per_rank, size_t count) override {
    return ring_->SumShards(shards, shards_per_rank, count, Deadline());
  }
  Status Broadcast(void* data, size_t bytes, int root) override {
    return ring_->Broadcast(data, bytes, root, Deadline());
  }
  Status Barrier() override { return ring_->Barrier(Deadline()); }

 private:
  static cluster::Deadline Deadline() { return cluster::DeadlineIn(milliseconds(30000)); }
  collective::RingAllReduce* ring_;
};

// The real CPU backend, asking `stop` to stop at its `stop_at`-th step (1-based; 0: never),
// as a SIGTERM during that step would.
class StoppingBackend final : public tj::testing::ForwardingBackend {
 public:
  StoppingBackend(std::unique_ptr<StepBackend> real, StopRequest* stop, int64_t stop_at)
      : ForwardingBackend(std::move(real)), stop_(stop), stop_at_(stop_at) {}

  Status ComputeGradients(float scale) override {
    if (++steps_ == stop_at_) stop_->Request();
    return ForwardingBackend::ComputeGradients(scale);
  }

 private:
  StopRequest* stop_;
  int64_t stop_at_;
  int64_t steps_ = 0;
};

const data::Dataset& Dataset() {
  static const data::Dataset dataset = tj::testing::SyntheticDataset(144);
  return dataset;
}

// 2 epochs of 4-image shards: 9 steps an epoch with 4 shards, 6 with 6; backups in `dir`.
Options TrainOptions(const TempDir& dir, int elastic_shards) {
  Options o;
  o.epochs = 2;
  o.batch_size = 4;
  o.elastic_shards = elastic_shards;
  o.backup_dir = dir.path() + "/backup";
  return o;
}

struct Replica {
  TrainingOutcome outcome;
  std::vector<nlohmann::json> events;

  std::vector<nlohmann::json> Of(const std::string& kind) const {
    std::vector<nlohmann::json> out;
    for (const auto& e : events) {
      if (e.value("event", "") == kind) out.push_back(e);
    }
    return out;
  }
  std::string Digest() const {
    auto ends = Of("train_end");
    return ends.empty() ? "" : ends.back().value("weights_sha256", "");
  }
};

// Trains `o` on `replicas` threads; the last replica is asked to stop at its `stop_at`-th step
// (0: never). Elastic or not, each replica computes its share of the shards.
std::vector<Replica> Train(const Options& o, int replicas, int64_t stop_at = 0) {
  tj::testing::MemoryStore store;
  std::vector<std::unique_ptr<collective::RingAllReduce>> rings;
  if (replicas > 1) {
    collective::RingAuth auth;
    auth.identity = {.gang = 0, .job_key = "elastic-test-key"};
    rings =
        tj::testing::ConnectLoopbackRings(replicas, collective::WireType::kFloat32, store, auth);
  }
  const int shards =
      o.elastic_shards > 0 && o.elastic_shards % replicas == 0 ? o.elastic_shards / replicas : 1;
  std::vector<Replica> results(replicas);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(replicas));
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back([&, r] {
      nn::ThreadPool pool(1);
      std::unique_ptr<collective::Communicator> comm;
      if (replicas == 1) {
        comm = collective::MakeSingleProcessCommunicator();
      } else {
        comm = std::make_unique<RingCommunicator>(rings[r].get());
      }
      StopRequest stop(kExitPeerLost);
      StoppingBackend backend(
          MakeCpuBackend(Dataset(), o.batch_size, &pool, nn::cpu::BestKernels(), shards), &stop,
          r == replicas - 1 ? stop_at : 0);
      FILE* out = std::tmpfile();
      {
        EventLog log(LogFormat::kJson, out, out);
        Progress progress;
        results[r].outcome = RunTrainingLoop({.options = &o,
                                              .dataset = &Dataset(),
                                              .comm = comm.get(),
                                              .pool = &pool,
                                              .kernels = &nn::cpu::BestKernels(),
                                              .log = &log,
                                              .progress = &progress,
                                              .is_chief = r == 0,
                                              .scalars = {},
                                              .backend = &backend,
                                              .gradient_comm = nullptr,
                                              .stop = &stop});
      }
      const std::string text = ReadAll(out);
      std::fclose(out);
      size_t at = 0;
      while (at < text.size()) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        auto j = nlohmann::json::parse(text.substr(at, end - at), nullptr, false);
        if (!j.is_discarded()) results[r].events.push_back(j);
        at = end + 1;
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// Trains to the end; every replica succeeds with the same weights, which it returns.
std::string TrainedDigest(const Options& o, int replicas) {
  auto results = Train(o, replicas);
  std::string digest = results[0].Digest();
  EXPECT_FALSE(digest.empty());
  for (const auto& r : results) {
    EXPECT_TRUE(r.outcome.status.ok()) << r.outcome.status.message();
    EXPECT_EQ(r.Digest(), digest);
  }
  return digest;
}

TEST(ElasticTraining, TheWeightsAreBitwiseTheSameAtEveryWorkerCountThatDividesTheShards) {
  for (int shards : {4, 6}) {
    TempDir dir;
    Options o = TrainOptions(dir, shards);
    const std::string one = TrainedDigest(o, 1);
    for (int replicas : {2, 3, 4, 6}) {
      if (shards % replicas != 0) continue;
      EXPECT_EQ(TrainedDigest(o, replicas), one) << shards << " shards on " << replicas;
    }
    // One worker per shard is the run without elastic mode.
    o.elastic_shards = 0;
    EXPECT_EQ(TrainedDigest(o, shards), one) << shards << " workers without elastic mode";
  }
}

// Stopped mid-epoch at 4 workers, resumed at 1 and stopped in the next epoch, resumed at 2
// to the end: bitwise the uninterrupted weights.
TEST(ElasticTraining, AStoppedRunResumesAtOtherWorkerCountsBitwise) {
  TempDir reference_dir;
  const std::string expected = TrainedDigest(TrainOptions(reference_dir, 4), 4);
  TempDir dir;
  const Options o = TrainOptions(dir, 4);
  struct Leg {
    int replicas;
    int64_t stop_at;  // the leg's own steps; 0: to the end
    int epoch, step;  // where it stops: epoch, steps done in it
  };
  // 9 steps an epoch: 4 workers stop after step 3 of epoch 1; 1 worker resumes there and stops
  // after its 8th step (step 2 of epoch 2); 2 workers finish.
  for (const Leg& leg : {Leg{4, 3, 1, 3}, Leg{1, 8, 2, 2}, Leg{2, 0, 0, 0}}) {
    SCOPED_TRACE(std::to_string(leg.replicas) + " workers");
    auto results = Train(o, leg.replicas, leg.stop_at);
    for (const auto& r : results) {
      ASSERT_TRUE(r.outcome.status.ok()) << r.outcome.status.message();
      if (leg.stop_at == 0) {
        EXPECT_EQ(r.outcome.exit_code, kExitOk);
        EXPECT_EQ(r.Digest(), expected);
        continue;
      }
      EXPECT_EQ(r.outcome.exit_code, kExitPeerLost);
      auto stopped = r.Of("stopped");
      ASSERT_EQ(stopped.size(), 1u);
      EXPECT_EQ(stopped[0]["epoch"], leg.epoch);
      EXPECT_EQ(stopped[0]["step"], leg.step);
    }
    if (leg.replicas != 4) {
      auto restored = results[0].Of("restored");
      ASSERT_EQ(restored.size(), 1u);
      EXPECT_EQ(restored[0]["workers"], leg.replicas);
      EXPECT_EQ(restored[0]["backup_workers"], leg.replicas == 1 ? 4 : 1);
      EXPECT_EQ(restored[0]["elastic_shards"], 4);
    }
  }
}

TEST(ElasticTraining, AWorkerCountThatDoesNotDivideTheShardsIsRefused) {
  TempDir dir;
  auto results = Train(TrainOptions(dir, 4), 3);
  for (const auto& r : results) {
    EXPECT_EQ(r.outcome.exit_code, kExitFailure);
    EXPECT_NE(r.outcome.status.message().find(
                  "4 elastic shards cannot be split among 3 workers: the worker count must "
                  "divide the shard count (1, 2, 4)"),
              std::string::npos)
        << r.outcome.status.message();
    EXPECT_TRUE(r.Of("epoch_end").empty());
  }
}

// Without elastic mode a backup resumes only at the worker count that wrote it; an elastic
// backup only at its shard count. The chief says why and what to do; the others point at it.
TEST(ElasticTraining, BackupsThatCannotResumeExactlyAreRefused) {
  TempDir dir;
  Options plain = TrainOptions(dir, 0);
  auto first = Train(plain, 2, 3);
  ASSERT_EQ(first[0].outcome.exit_code, kExitPeerLost) << first[0].outcome.status.message();
  auto one = Train(plain, 1);
  EXPECT_EQ(one[0].outcome.exit_code, kExitFailure);
  EXPECT_NE(one[0].outcome.status.message().find(
                "was written by 2 workers without elastic mode (global batch 8) and this run "
                "has 1 worker without elastic mode (global batch 4)"),
            std::string::npos)
      << one[0].outcome.status.message();
  // Elastic mode with as many shards as that run had workers resumes it (exactly).
  Options elastic = TrainOptions(dir, 2);
  auto resumed = Train(elastic, 1, 2);
  ASSERT_EQ(resumed[0].outcome.exit_code, kExitPeerLost) << resumed[0].outcome.status.message();
  // Another shard count does not.
  auto four = Train(TrainOptions(dir, 4), 2);
  for (const auto& r : four) EXPECT_EQ(r.outcome.exit_code, kExitFailure);
  EXPECT_NE(four[0].outcome.status.message().find(
                "was written by 2 elastic shards on 1 worker (global batch 8) and this run has "
                "4 elastic shards on 2 workers (global batch 16)"),
            std::string::npos)
      << four[0].outcome.status.message();
  EXPECT_NE(four[1].outcome.status.message().find("the chief could not restore"), std::string::npos)
      << four[1].outcome.status.message();
}

}  // namespace
}  // namespace tj::train
