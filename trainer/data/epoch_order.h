// The order in which an epoch visits the training set, and which images a worker takes.
// A pure function of (seed, epoch): every worker computes the same order without talking,
// and a resumed run replays exactly the batches that remain.
#pragma once

#include <cstdint>
#include <vector>

namespace tj::data {

// A permutation of 0..count-1 (Fisher-Yates driven by SplitMix64(DeriveSeed(seed, epoch))).
// `epoch` counts from 1.
std::vector<uint32_t> EpochOrder(uint64_t seed, int epoch, int count);

// How one epoch is cut: global batch = batch_per_replica x replicas; worker `rank` takes
// slice `rank` of every global batch.
struct ShardPlan {
  int batch_per_replica = 64;
  int replicas = 1;
  int rank = 0;
  int steps_cap = 0;  // 0: no cap

  int GlobalBatch() const { return batch_per_replica * replicas; }
  // Steps per epoch: count / global batch rounded down, capped by steps_cap when set.
  int StepsPerEpoch(int count) const;
  // Offset into the epoch order of this worker's first image in `step` (0-based).
  int64_t SliceStart(int step) const {
    return int64_t{step} * GlobalBatch() + int64_t{rank} * batch_per_replica;
  }
};

}  // namespace tj::data
