// The convolution of the seeds' model through cuDNN, an alternative to the fused kernel of
// gpu_step.cu, chosen with TJ_GPU_CONV=cudnn (default: own) so that a GPU run can measure
// both. cuDNN computes the 3x3 convolution (forward: implicit precomputed GEMM; weight
// gradient: CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, deterministic; bias gradient:
// cudnnConvolutionBackwardBias), in full float32 (CUDNN_FMA_MATH: no TF32); our kernels do
// the bias + ReLU + max-pool around it and move between our layouts and cuDNN's NCHW/KCRS.
// There is no input gradient: the convolution reads the images.
//
// Status: compiled, NOT yet run on a GPU. Built when cuDNN is found (TJ_HAVE_CUDNN). Not
// thread-safe; every call enqueues on the stream given at creation.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "common/status.h"

namespace tj::cuda {

class CudnnConv {
 public:
  // Buffers for batches of up to `max_rows` images; work goes on `stream`.
  static StatusOr<std::unique_ptr<CudnnConv>> Create(int max_rows, cudaStream_t stream);
  virtual ~CudnnConv() = default;

  // Conv + bias + ReLU + 2x2 max-pool of images[index[r]] for r < rows: pooled (rows x 5408,
  // h,w,c) and the winning window position per output (0..3), as the fused kernel writes them.
  // `kernel` is our [3][3][32] layout, `bias` [32].
  virtual Status Forward(const float* images, const uint32_t* index, int rows, const float* kernel,
                         const float* bias, float* pooled, uint8_t* argmax) = 0;
  // The conv kernel and bias gradients (320 floats at dconv, our layout) of the last Forward's
  // images, given the gradient w.r.t. pooled.
  virtual Status BackwardParams(const float* pooled, const uint8_t* argmax, const float* dpooled,
                                int rows, float* dconv) = 0;
};

}  // namespace tj::cuda
