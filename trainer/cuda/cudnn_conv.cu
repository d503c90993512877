#include <cudnn.h>

#include <string>
#include <vector>

#include "trainer/cuda/cuda_check.h"
#include "trainer/cuda/cudnn_conv.h"
#include "trainer/cuda/kernel_math.h"
#include "trainer/cuda/launch_geometry.h"
#include "trainer/nn/model.h"

namespace tj::cuda {
namespace {

using nn::kConvChannels;
using nn::kConvOut;
using nn::kFlat;
using nn::kInputPixels;
using nn::kPoolOut;

constexpr int kConvOutPixels = kConvOut * kConvOut;  // 676 per channel

#define TJ_CUDNN(call) \
  TJ_CHECK_LIBRARY_CALL("cuDNN", cudnnStatus_t, CUDNN_STATUS_SUCCESS, cudnnGetErrorString, call)

// x[r][p] = images[index[r]][p]: the batch as cuDNN's NCHW input (C = 1).
__global__ void GatherImages(const float* images, const uint32_t* index, int rows, float* x) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(rows) * kInputPixels) return;
  const size_t r = i / kInputPixels, p = i % kInputPixels;
  x[i] = images[size_t(index[r]) * kInputPixels + p];
}

// Our kernel [k = ky*3+kx][c] to cuDNN's KCRS [c][k] (one input channel), and back.
__global__ void KernelToKcrs(const float* ours, float* kcrs) {
  const int t = threadIdx.x;
  if (t < 9 * kConvChannels) kcrs[t] = ours[math::KcrsSourceOfOurs(t)];
}
__global__ void KernelFromKcrs(const float* kcrs, float* ours) {
  const int t = threadIdx.x;
  if (t < 9 * kConvChannels) ours[t] = kcrs[math::OursSourceOfKcrs(t)];
}

// From the conv output y [rows][32][26][26]: + bias, 2x2 max-pool (first maximum wins, as in
// the fused kernel), ReLU; pooled and argmax in our (h, w, c) layout.
__global__ void BiasPoolRelu(const float* y, const float* bias, int rows, float* pooled,
                             uint8_t* argmax) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(rows) * kFlat) return;
  const size_t r = i / kFlat;
  const int o = static_cast<int>(i % kFlat), c = o % kConvChannels, cell = o / kConvChannels;
  math::BiasPoolReluOutput(y + (r * kConvChannels + c) * kConvOutPixels, bias[c], cell, &pooled[i],
                           &argmax[i]);
}

// dy [rows][32][26][26]: the pooled gradient at each window's winner where the ReLU passed it,
// zero elsewhere.
__global__ void PoolReluBackward(const float* pooled, const uint8_t* argmax, const float* dpooled,
                                 int rows, float* dy) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(rows) * kConvChannels * kConvOutPixels) return;
  const int pixel = static_cast<int>(i % kConvOutPixels);
  const size_t plane = i / kConvOutPixels;
  const int c = static_cast<int>(plane % kConvChannels);
  const size_t r = plane / kConvChannels;
  dy[i] = math::PoolReluBackwardPixel(pooled + r * kFlat, argmax + r * kFlat, dpooled + r * kFlat,
                                      c, pixel / kConvOut, pixel % kConvOut);
}

class CudnnConvImpl final : public CudnnConv {
 public:
  ~CudnnConvImpl() override {
    if (conv_) cudnnDestroyConvolutionDescriptor(conv_);
    if (filter_) cudnnDestroyFilterDescriptor(filter_);
    for (cudnnTensorDescriptor_t t : {x_desc_, y_desc_, bias_desc_})
      if (t) cudnnDestroyTensorDescriptor(t);
    if (handle_) cudnnDestroy(handle_);
    for (void* p : owned_) cudaFree(p);
  }

  Status Init(int max_rows, cudaStream_t stream) {
    max_rows_ = max_rows;
    stream_ = stream;
    TJ_CUDNN(cudnnCreate(&handle_));
    TJ_CUDNN(cudnnSetStream(handle_, stream));
    TJ_CUDNN(cudnnCreateTensorDescriptor(&x_desc_));
    TJ_CUDNN(cudnnCreateTensorDescriptor(&y_desc_));
    TJ_CUDNN(cudnnCreateTensorDescriptor(&bias_desc_));
    TJ_CUDNN(cudnnCreateFilterDescriptor(&filter_));
    TJ_CUDNN(cudnnCreateConvolutionDescriptor(&conv_));
    TJ_CUDNN(cudnnSetFilter4dDescriptor(filter_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kConvChannels,
                                        1, 3, 3));
    TJ_CUDNN(cudnnSetTensor4dDescriptor(bias_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                        kConvChannels, 1, 1));
    TJ_CUDNN(cudnnSetConvolution2dDescriptor(conv_, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                             CUDNN_DATA_FLOAT));
    TJ_CUDNN(cudnnSetConvolutionMathType(conv_, CUDNN_FMA_MATH));  // no TF32
    TJ_RETURN_IF_ERROR(SetRows(max_rows));
    size_t fwd = 0, bwd = 0;
    TJ_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(handle_, x_desc_, filter_, conv_, y_desc_,
                                                     kForwardAlgo, &fwd));
    TJ_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle_, x_desc_, y_desc_, conv_,
                                                            filter_, kFilterAlgo, &bwd));
    workspace_bytes_ = std::max<size_t>({fwd, bwd, 1});
    TJ_RETURN_IF_ERROR(Own(&workspace_, workspace_bytes_));
    TJ_RETURN_IF_ERROR(Own(&x_, size_t(max_rows) * kInputPixels * sizeof(float)));
    TJ_RETURN_IF_ERROR(Own(&y_, size_t(max_rows) * kConvChannels * kConvOutPixels * sizeof(float)));
    TJ_RETURN_IF_ERROR(Own(&kcrs_, 9 * kConvChannels * sizeof(float)));
    TJ_RETURN_IF_ERROR(Own(&dkcrs_, 9 * kConvChannels * sizeof(float)));
    return Status::Ok();
  }

  Status Forward(const float* images, const uint32_t* index, int rows, const float* kernel,
                 const float* bias, float* pooled, uint8_t* argmax) override {
    TJ_RETURN_IF_ERROR(SetRows(rows));
    const size_t pixels = size_t(rows) * kInputPixels;
    const LaunchShape gather = Elementwise(pixels);
    GatherImages<<<gather.grid, gather.block, 0, stream_>>>(images, index, rows, x());
    KernelToKcrs<<<FilterElements().grid, FilterElements().block, 0, stream_>>>(kernel, kcrs());
    const float one = 1.0f, zero = 0.0f;
    TJ_CUDNN(cudnnConvolutionForward(handle_, &one, x_desc_, x(), filter_, kcrs(), conv_,
                                     kForwardAlgo, workspace_, workspace_bytes_, &zero, y_desc_,
                                     y()));
    const size_t outputs = size_t(rows) * kFlat;
    const LaunchShape pool = Elementwise(outputs);
    BiasPoolRelu<<<pool.grid, pool.block, 0, stream_>>>(y(), bias, rows, pooled, argmax);
    TJ_CUDA(cudaGetLastError());
    return Status::Ok();
  }

  Status BackwardParams(const float* pooled, const uint8_t* argmax, const float* dpooled, int rows,
                        float* dconv) override {
    TJ_RETURN_IF_ERROR(SetRows(rows));
    const size_t cells = size_t(rows) * kConvChannels * kConvOutPixels;
    const LaunchShape back = Elementwise(cells);
    PoolReluBackward<<<back.grid, back.block, 0, stream_>>>(pooled, argmax, dpooled, rows, y());
    const float one = 1.0f, zero = 0.0f;
    TJ_CUDNN(cudnnConvolutionBackwardFilter(handle_, &one, x_desc_, x(), y_desc_, y(), conv_,
                                            kFilterAlgo, workspace_, workspace_bytes_, &zero,
                                            filter_, dkcrs()));
    KernelFromKcrs<<<FilterElements().grid, FilterElements().block, 0, stream_>>>(dkcrs(), dconv);
    // The bias gradient: our layout's 32 floats after the kernel's 288.
    TJ_CUDNN(cudnnConvolutionBackwardBias(handle_, &one, y_desc_, y(), &zero, bias_desc_,
                                          dconv + 9 * kConvChannels));
    TJ_CUDA(cudaGetLastError());
    return Status::Ok();
  }

 private:
  static constexpr cudnnConvolutionFwdAlgo_t kForwardAlgo =
      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  static constexpr cudnnConvolutionBwdFilterAlgo_t kFilterAlgo =
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;  // deterministic

  Status SetRows(int rows) {
    if (rows < 1 || rows > max_rows_) return Status::Error("cuDNN conv: batch size out of range");
    if (rows == rows_) return Status::Ok();
    TJ_CUDNN(
        cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, rows, 1, 28, 28));
    TJ_CUDNN(cudnnSetTensor4dDescriptor(y_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, rows,
                                        kConvChannels, kConvOut, kConvOut));
    rows_ = rows;
    return Status::Ok();
  }
  Status Own(void** p, size_t bytes) {
    TJ_CUDA(cudaMalloc(p, bytes));
    owned_.push_back(*p);
    return Status::Ok();
  }
  float* x() { return static_cast<float*>(x_); }
  float* y() { return static_cast<float*>(y_); }  // conv output, then its gradient
  float* kcrs() { return static_cast<float*>(kcrs_); }
  float* dkcrs() { return static_cast<float*>(dkcrs_); }

  int max_rows_ = 0;
  int rows_ = 0;
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr, bias_desc_ = nullptr;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  std::vector<void*> owned_;
  void *workspace_ = nullptr, *x_ = nullptr, *y_ = nullptr, *kcrs_ = nullptr, *dkcrs_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<CudnnConv>> CudnnConv::Create(int max_rows, cudaStream_t stream) {
  auto conv = std::make_unique<CudnnConvImpl>();
  if (Status s = conv->Init(max_rows, stream); !s.ok()) {
    return s.WithContext("setting up the cuDNN convolution (TJ_GPU_CONV=cudnn)");
  }
  return std::unique_ptr<CudnnConv>(std::move(conv));
}

}  // namespace tj::cuda
