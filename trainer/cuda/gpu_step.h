// The GPU backend of the seeds' model (first version): the same function as the CPU step
// (trainer/nn/cpu_step.h) with the data and all state on the device: fused kernels of our
// own for conv + ReLU + max-pool, the loss and the small layers, cuBLAS for the dense1
// GEMMs, a deterministic conv weight-gradient reduction, Adam on the device.
//
// Status: compiled wherever nvcc is found; NOT yet run on a GPU (no GPU was available when it
// was written). Its tests (label gpu) compare it with the CPU backend and skip without a GPU.
// Not yet wired into tj-trainer (--device gpu still fails clearly). Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"

namespace tj::cuda {

// Number of CUDA devices visible (0 when there is no driver or no device).
int VisibleDevices();

class GpuStep {
 public:
  // Copies `count` images (count x 784 floats, already scaled to [0, 1]) and labels to the
  // device once. `max_rows` bounds the batch.
  static StatusOr<std::unique_ptr<GpuStep>> Create(const float* images, const uint8_t* labels,
                                                   int count, int max_rows, int device = 0);
  virtual ~GpuStep() = default;

  virtual Status SetParameters(const std::vector<float>& params) = 0;
  virtual Status GetParameters(std::vector<float>* params) = 0;
  virtual Status GetGradients(std::vector<float>* grad) = 0;

  // Forward and backward over images index[0..rows) (host indices, copied to the device);
  // gradients of (sum of losses) x scale into the device gradient buffer; returns the loss
  // sum and the number correct.
  virtual Status ComputeGradients(const uint32_t* index, int rows, float scale,
                                  double* loss_sum, int* correct) = 0;
  // One Keras-Adam update (see trainer/nn/adam.h) with the device gradients.
  virtual Status ApplyAdam(double learning_rate, int64_t iteration) = 0;
  // Device pointer to the gradients (Layout::kCount floats), for an NCCL all-reduce.
  virtual float* device_gradients() = 0;
};

}  // namespace tj::cuda
