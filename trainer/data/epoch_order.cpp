#include "trainer/data/epoch_order.h"

#include <algorithm>
#include <numeric>
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

}  // namespace tj::data
