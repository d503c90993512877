// The GPU backend of the seeds' model: the same function as the CPU step (trainer/nn/), with
// the dataset, the weights, the Adam state and the epoch's running sums all resident on one
// device. Fused kernels of our own for conv + ReLU + max-pool, the loss and the small layers,
// cuBLAS for the dense1 GEMMs (full float32, no TF32), a deterministic conv weight-gradient
// reduction (no atomics), Adam on the device.
//
// A training step needs no host synchronisation: the epoch's order is uploaded once per epoch,
// the batch slice, the iteration count and the learning rate live in device memory, and the
// step is two CUDA graphs (gradients; then the update) captured once and replayed. Between
// the two the caller may all-reduce reduce_buffer() in place (NCCL) on stream().
//
// Status: compiled wherever nvcc is found; NOT yet run on a GPU (none was available when it
// was written). Its tests (label gpu) compare it with the CPU backend and skip without a GPU.
// Not thread-safe: one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::cuda {

// Number of CUDA devices visible (0 when there is no driver or no device).
int VisibleDevices();

// Why no CUDA device is visible, for messages: no NVIDIA driver, the CUDA runtime's error, or
// CUDA_VISIBLE_DEVICES; "" when one is.
std::string NoDeviceReason();

// "<index> <name> (sm_<major><minor>, <memory> MiB)" of a device, for logs; an error text when
// the device cannot be queried.
std::string DeviceDescription(int device);

class GpuStep {
 public:
  // Copies `count` images (count x 784 floats, already scaled to [0, 1]) and labels to the
  // device once. `max_rows` is the batch of a training step (the graphs use exactly that many
  // rows); `device` the CUDA device index.
  static StatusOr<std::unique_ptr<GpuStep>> Create(const float* images, const uint8_t* labels,
                                                   int count, int max_rows, int device = 0);
  virtual ~GpuStep() = default;

  // ---- State, as host vectors of Layout::kCount floats (these calls synchronise).
  virtual Status SetParameters(const std::vector<float>& params) = 0;
  virtual Status GetParameters(std::vector<float>* params) = 0;
  virtual Status GetGradients(std::vector<float>* grad) = 0;
  virtual Status SetOptimizerState(const std::vector<float>& m, const std::vector<float>& v,
                                   int64_t iterations) = 0;
  virtual Status GetOptimizerState(std::vector<float>* m, std::vector<float>* v,
                                   int64_t* iterations) = 0;
  // The epoch's running sums of the per-image losses and of the correct predictions (summed
  // over every replica: they ride in the all-reduced buffer).
  virtual Status SetEpochSums(double loss_sum, double correct) = 0;
  virtual Status GetEpochSums(double* loss_sum, double* correct) = 0;

  // ---- The training step, asynchronous on stream().
  // Uploads the epoch's order (`count` indices into the images) and sets where the next
  // step's rows start in it, how far each step moves on, and the learning rate.
  virtual Status BeginEpoch(const uint32_t* order, int count, int64_t first_slice,
                            int64_t slice_stride, double learning_rate) = 0;
  // Forward and backward over the max_rows images at the current slice: the gradients of
  // (sum of losses) x scale into reduce_buffer()[0..kCount), the batch's loss sum and number
  // correct (as floats) into reduce_buffer()[kCount] and [kCount + 1].
  virtual Status EnqueueGradients(float scale) = 0;
  // Adds reduce_buffer()'s loss and correct to the epoch sums, applies one Keras-Adam update
  // (see trainer/nn/adam.h) with its gradients, and advances the slice.
  virtual Status EnqueueUpdate() = 0;
  // The convolution in use: "own" (the fused kernel) or "cudnn" (TJ_GPU_CONV=cudnn).
  virtual std::string convolution() const = 0;
  // Device pointer to kCount + 2 floats (gradients, loss sum, correct), for an all-reduce.
  virtual float* reduce_buffer() = 0;
  // The cudaStream_t every call above enqueues on (as void*, so that this header needs no
  // CUDA headers).
  virtual void* stream() = 0;
  // Waits for the stream; returns the first asynchronous error.
  virtual Status Synchronize() = 0;

  // ---- Host-driven calls for the kernel tests (synchronise; no graphs).
  // Forward and backward over images index[0..rows) (host indices); returns the loss sum and
  // the number correct.
  virtual Status ComputeGradients(const uint32_t* index, int rows, float scale, double* loss_sum,
                                  int* correct) = 0;
  // One Keras-Adam update with the device gradients at iteration `iteration` (from 1).
  virtual Status ApplyAdam(double learning_rate, int64_t iteration) = 0;
};

}  // namespace tj::cuda
