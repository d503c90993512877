// The order in which an epoch visits the training set, and which images a worker takes.
// A pure function of (seed, epoch): every worker computes the same order without talking,
// and a resumed run replays exactly the batches that remain.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tj::data {

// A permutation of 0..count-1 (Fisher-Yates driven by SplitMix64(DeriveSeed(seed, epoch))).
// `epoch` counts from 1.
std::vector<uint32_t> EpochOrder(uint64_t seed, int epoch, int count);

// How one epoch is cut. Each step's global batch is `shards` consecutive slices of the epoch
// order, `batch_per_shard` images each; worker `rank` of `replicas` takes the contiguous
// shards [rank x S/n, (rank + 1) x S/n) (S shards, n replicas; n must divide S). Shard k of
// step t is the same images whichever worker computes it, so a run resumed at another
// worker count skips and repeats nothing. Without elastic mode a worker is one shard
// (shards == replicas), as before elastic mode existed.
struct ShardPlan {
  int batch_per_shard = 64;
  int shards = 1;
  int replicas = 1;
  int rank = 0;
  int steps_cap = 0;  // 0: no cap

  int GlobalBatch() const { return batch_per_shard * shards; }
  int ShardsPerReplica() const { return shards / replicas; }
  // Steps per epoch: count / global batch rounded down, capped by steps_cap when set.
  int StepsPerEpoch(int count) const;
  // Offset into the epoch order of shard `shard`'s first image in `step` (both 0-based).
  int64_t ShardStart(int step, int shard) const {
    return int64_t{step} * GlobalBatch() + int64_t{shard} * batch_per_shard;
  }
  // Offset into the epoch order of this worker's first image in `step`: its first shard's.
  int64_t SliceStart(int step) const { return ShardStart(step, rank * ShardsPerReplica()); }
};

// Empty when `replicas` workers can train `shards` elastic shards (n divides S), else why
// not, naming the worker counts that can.
std::string ShardLayoutError(int shards, int replicas);

}  // namespace tj::data
