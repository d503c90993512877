#include "trainer/data/epoch_order.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "common/random.h"

namespace tj::data {

std::vector<uint32_t> EpochOrder(uint64_t seed, int epoch, int count) {
  std::vector<uint32_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0u);
  SplitMix64 rng(DeriveSeed(seed, static_cast<uint64_t>(epoch)));
  for (int i = count - 1; i > 0; --i) {
    auto j = static_cast<int>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

int ShardPlan::StepsPerEpoch(int count) const {
  int steps = count / GlobalBatch();
  if (steps_cap > 0) steps = std::min(steps, steps_cap);
  return steps;
}

std::string ShardLayoutError(int shards, int replicas) {
  if (shards >= 1 && replicas >= 1 && shards % replicas == 0) return "";
  std::string divisors;
  for (int n = 1; n <= shards; ++n) {
    if (shards % n == 0) divisors += (divisors.empty() ? "" : ", ") + std::to_string(n);
  }
  return std::to_string(shards) + " elastic shards cannot be split among " +
         std::to_string(replicas) + " workers: the worker count must divide the shard count (" +
         (divisors.empty() ? std::string("none") : divisors) + ")";
}

}  // namespace tj::data
