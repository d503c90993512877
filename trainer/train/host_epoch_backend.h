// What the two host (CPU) backends keep of an epoch, and the StepBackend methods that set and
// read it: the epoch's order of examples, where the current step's slice of it starts, how far
// the next step's is, the learning rate and the epoch's loss and correct sums. The backends
// (cpu_backend.cpp, declared_backend.cpp) derive from it and compute the steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/train/step_backend.h"

namespace tj::train {

class HostEpochBackend : public StepBackend {
 public:
  Status SetEpochSums(double loss_sum, double correct) override {
    loss_sum_ = loss_sum;
    correct_ = correct;
    return Status::Ok();
  }
  Status GetEpochSums(double* loss_sum, double* correct) override {
    *loss_sum = loss_sum_;
    *correct = correct_;
    return Status::Ok();
  }
  Status BeginEpoch(int epoch, const std::vector<uint32_t>& order, int64_t first_slice,
                    int64_t slice_stride, double learning_rate) override {
    epoch_ = epoch;
    order_ = order;
    slice_ = first_slice;
    slice_stride_ = slice_stride;
    learning_rate_ = learning_rate;
    return Status::Ok();
  }

 protected:
  // An error naming `backend` when a step of `rows` examples runs past the epoch's order.
  Status CheckStepFits(int64_t rows, const char* backend) const {
    if (slice_ < 0 || slice_ + rows > static_cast<int64_t>(order_.size())) {
      return Status::Error(std::string(backend) + ": step past the end of the epoch's order");
    }
    return Status::Ok();
  }
  // The examples of shard `shard` (of `batch_size` each) of the current step.
  const uint32_t* ShardOrder(int shard, int batch_size) const {
    return order_.data() + slice_ + int64_t{shard} * batch_size;
  }
  // The step's summed loss and correct count added to the epoch's; the next step's slice.
  void EndStep(double loss_sum, double correct) {
    loss_sum_ += loss_sum;
    correct_ += correct;
    slice_ += slice_stride_;
  }
  double learning_rate() const { return learning_rate_; }
  int epoch() const { return epoch_; }
  const std::vector<uint32_t>& order() const { return order_; }
  // The current step's first slice and the stride to the next step's.
  int64_t slice() const { return slice_; }
  int64_t slice_stride() const { return slice_stride_; }

 private:
  int epoch_ = 0;
  std::vector<uint32_t> order_;
  int64_t slice_ = 0;
  int64_t slice_stride_ = 0;
  double learning_rate_ = 0.0;
  double loss_sum_ = 0.0;
  double correct_ = 0.0;
};

}  // namespace tj::train
