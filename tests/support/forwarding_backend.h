// Test support: a StepBackend that hands every call to a real one, for the fakes of the
// training loop's tests that change one thing (poison a gradient, ask for a stop at a step).
// Header-only.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/train/step_backend.h"

namespace tj::testing {

class ForwardingBackend : public train::StepBackend {
 public:
  explicit ForwardingBackend(std::unique_ptr<train::StepBackend> real) : real_(std::move(real)) {}

  std::string description() const override { return real_->description(); }
  bool device_buffers() const override { return real_->device_buffers(); }
  void* device_stream() override { return real_->device_stream(); }
  size_t parameter_count() const override { return real_->parameter_count(); }
  size_t reduce_floats() const override { return real_->reduce_floats(); }
  Status SetState(const train::ModelState& state) override { return real_->SetState(state); }
  StatusOr<train::ModelState> GetState() override { return real_->GetState(); }
  Status SetEpochSums(double loss_sum, double correct) override {
    return real_->SetEpochSums(loss_sum, correct);
  }
  Status GetEpochSums(double* loss_sum, double* correct) override {
    return real_->GetEpochSums(loss_sum, correct);
  }
  Status BeginEpoch(int epoch, const std::vector<uint32_t>& order, int64_t first_slice,
                    int64_t slice_stride, double learning_rate) override {
    return real_->BeginEpoch(epoch, order, first_slice, slice_stride, learning_rate);
  }
  Status ComputeGradients(float scale) override { return real_->ComputeGradients(scale); }
  float* reduce_buffer() override { return real_->reduce_buffer(); }
  int shards() const override { return real_->shards(); }
  float* shard_buffer(int shard) override { return real_->shard_buffer(shard); }
  Status ApplyUpdate() override { return real_->ApplyUpdate(); }
  Status WaitForSteps() override { return real_->WaitForSteps(); }

 private:
  std::unique_ptr<train::StepBackend> real_;
};

}  // namespace tj::testing
