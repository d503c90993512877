// The GPU backend behind the training loop's seam: cuda::GpuStep holds the training set, the
// model, Adam's state and the epoch sums on one device; a step is two graph replays with no
// host synchronisation. Built only with CUDA (no_gpu_backend.cpp otherwise).
#include <string>

#include "trainer/cuda/gpu_step.h"
#include "trainer/nn/model.h"
#include "trainer/train/step_backend.h"

namespace tj::train {
namespace {

class GpuBackend final : public StepBackend {
 public:
  GpuBackend(std::unique_ptr<cuda::GpuStep> step, int device)
      : step_(std::move(step)),
        description_("gpu " + cuda::DeviceDescription(device) + ", conv " + step_->convolution()) {}

  std::string description() const override { return description_; }
  bool device_buffers() const override { return true; }
  void* device_stream() override { return step_->stream(); }

  Status SetState(const ModelState& state) override {
    TJ_RETURN_IF_ERROR(step_->SetParameters(state.params));
    return step_->SetOptimizerState(state.adam_m, state.adam_v, state.iterations);
  }
  StatusOr<ModelState> GetState() override {
    ModelState s;
    TJ_RETURN_IF_ERROR(step_->GetParameters(&s.params));
    TJ_RETURN_IF_ERROR(step_->GetOptimizerState(&s.adam_m, &s.adam_v, &s.iterations));
    return s;
  }
  Status SetEpochSums(double loss_sum, double correct) override {
    return step_->SetEpochSums(loss_sum, correct);
  }
  Status GetEpochSums(double* loss_sum, double* correct) override {
    return step_->GetEpochSums(loss_sum, correct);
  }
  Status BeginEpoch(int /*epoch*/, const std::vector<uint32_t>& order, int64_t first_slice,
                    int64_t slice_stride, double learning_rate) override {
    return step_->BeginEpoch(order.data(), static_cast<int>(order.size()), first_slice,
                             slice_stride, learning_rate);
  }
  Status ComputeGradients(float scale) override { return step_->EnqueueGradients(scale); }
  float* reduce_buffer() override { return step_->reduce_buffer(); }
  Status ApplyUpdate() override { return step_->EnqueueUpdate(); }
  Status WaitForSteps() override { return step_->Synchronize(); }

 private:
  std::unique_ptr<cuda::GpuStep> step_;
  std::string description_;
};

}  // namespace

int VisibleGpus() { return cuda::VisibleDevices(); }

StatusOr<std::unique_ptr<StepBackend>> MakeGpuBackend(const data::Dataset& dataset, int batch_size,
                                                      int device) {
  auto step = cuda::GpuStep::Create(dataset.train.images.data(), dataset.train.labels.data(),
                                    dataset.train.count, batch_size, device);
  if (!step.ok()) return step.status();
  return std::unique_ptr<StepBackend>(std::make_unique<GpuBackend>(std::move(*step), device));
}

}  // namespace tj::train
