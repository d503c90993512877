#include <string>

#include "trainer/collective/communicator.h"
#include "trainer/collective/ring_allreduce.h"

namespace tj::collective {

Status Communicator::AllReduceShardsSum(float* const*, int shards_per_rank, size_t) {
  return Status::Error("this communicator cannot sum " + std::to_string(shards_per_rank) +
                       " elastic shards per rank in the ring's order (only the ring all-reduce "
                       "and a single process can)");
}

namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status AllReduceSum(float*, size_t) override { return Status::Ok(); }
  // Every shard is here: the ring's order, folded in place.
  Status AllReduceShardsSum(float* const* shards, int shards_per_rank, size_t count) override {
    SumInRingOrder(shards, shards_per_rank, count);
    return Status::Ok();
  }
  Status Broadcast(void*, size_t, int root) override {
    if (root != 0) {
      return Status::Error("broadcast from rank " + std::to_string(root) +
                           ": a single-process communicator has only rank 0");
    }
    return Status::Ok();
  }
  Status Barrier() override { return Status::Ok(); }
};

}  // namespace

std::unique_ptr<Communicator> MakeSingleProcessCommunicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

}  // namespace tj::collective
