#include "trainer/collective/communicator.h"

namespace tj::collective {
namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status AllReduceSum(float*, size_t) override { return Status::Ok(); }
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
