// The collective operations the training loop needs, behind one device-agnostic interface:
// a single-process no-op implementation, Gloo over TCP for CPU tensors (gloo_communicator.h)
// and, later, NCCL for GPU tensors. A collective that loses or waits too long on a peer
// returns an error (the trainer maps it to exit code 75); it never hangs.
#pragma once

#include <cstddef>
#include <memory>

#include "common/status.h"

namespace tj::collective {

// One per process. Not thread-safe: call from the training thread only. Every rank must call
// the same operations in the same order with the same sizes (as with any collective
// library). After an operation fails, the communicator is broken: every later call returns
// the first error at once.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Sums data[0..count) element-wise across all ranks, in place. Every rank ends with bitwise
  // the same result. Fails (never hangs) within the collective timeout when a peer dies or
  // hangs; the message names the peer(s) (task name and TF_CONFIG address) when known.
  virtual Status AllReduceSum(float* data, size_t count) = 0;
  // Elastic training: sums shards_per_rank x size() buffers of `count` floats, this rank's
  // being shards[0..shards_per_rank), in the one order the ring of ring_allreduce.h takes
  // with one buffer per rank (SumInRingOrder), whatever size() is; the result lands in
  // shards[0] on every rank, the other buffers are overwritten. So the sum of S shards is
  // bitwise the same on 1, 2, ... S ranks (every size that divides S). Communicators that
  // cannot keep that order (Gloo's own all-reduce, NCCL) return an error.
  virtual Status AllReduceShardsSum(float* const* shards, int shards_per_rank, size_t count);
  // Copies `bytes` bytes at `data` from rank `root` to every other rank.
  virtual Status Broadcast(void* data, size_t bytes, int root) = 0;
  // Returns once every rank has entered the barrier.
  virtual Status Barrier() = 0;
};

// size 1, rank 0: every operation is a no-op that succeeds (one process, no TF_CONFIG).
std::unique_ptr<Communicator> MakeSingleProcessCommunicator();

}  // namespace tj::collective
