#include "trainer/cuda/gpu_step.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "trainer/nn/model.h"

namespace tj::cuda {
namespace {

using nn::kClasses;
using nn::kFlat;
using nn::kHidden;
using nn::kInputPixels;
using nn::Layout;


Status CudaError(cudaError_t e, const char* what) {
  return Status::Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}
Status CublasError(cublasStatus_t s, const char* what) {
  return Status::Error(std::string("cuBLAS: ") + what + " failed with status " +
                       std::to_string(static_cast<int>(s)));
}
#define TJ_CUDA(call)                                          \
  do {                                                         \
    cudaError_t e_ = (call);                                   \
    if (e_ != cudaSuccess) return CudaError(e_, #call);        \
  } while (0)
#define TJ_CUBLAS(call)                                        \
  do {                                                         \
    cublasStatus_t s_ = (call);                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) return CublasError(s_, #call); \
  } while (0)

// ---- Kernels. Sums run in a fixed order (no atomics), so results are deterministic.

// One block per image: conv 3x3 (32 channels) + bias + ReLU + 2x2 max-pool, as the CPU kernel.
__global__ void ConvReluPoolForward(const float* images, const uint32_t* index, const float* w,
                                    const float* b, float* pooled, uint8_t* argmax) {
  __shared__ float img[kInputPixels];
  __shared__ float sw[288];
  __shared__ float sb[32];
  const int r = blockIdx.x;
  const float* src = images + static_cast<size_t>(index[r]) * kInputPixels;
  for (int i = threadIdx.x; i < kInputPixels; i += blockDim.x) img[i] = src[i];
  for (int i = threadIdx.x; i < 288; i += blockDim.x) sw[i] = w[i];
  if (threadIdx.x < 32) sb[threadIdx.x] = b[threadIdx.x];
  __syncthreads();
  for (int o = threadIdx.x; o < kFlat; o += blockDim.x) {
    const int c = o & 31, cell = o >> 5, py = cell / 13, px = cell % 13;
    float best = 0.0f;
    int arg = 0;
    for (int d = 0; d < 4; ++d) {
      const int oy = 2 * py + (d >> 1), ox = 2 * px + (d & 1);
      float a = sb[c];
      for (int ky = 0; ky < 3; ++ky)
        for (int kx = 0; kx < 3; ++kx) a = fmaf(img[(oy + ky) * 28 + ox + kx], sw[(ky * 3 + kx) * 32 + c], a);
      if (d == 0 || a > best) {
        best = a;
        arg = d;
      }
    }
    pooled[static_cast<size_t>(r) * kFlat + o] = best > 0.0f ? best : 0.0f;
    argmax[static_cast<size_t>(r) * kFlat + o] = static_cast<uint8_t>(arg);
  }
}

// hidden[r][j] = relu(hidden[r][j] + bias[j]) after the cuBLAS product.
__global__ void BiasRelu(float* hidden, const float* bias, int rows) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * kHidden) return;
  const float y = hidden[i] + bias[i % kHidden];
  hidden[i] = y > 0.0f ? y : 0.0f;
}

// One block of 64 threads per row: dense2, softmax cross-entropy, dlogits, dhidden.
__global__ void Head(const float* hidden, const float* w2, const float* b2,
                     const uint8_t* labels, const uint32_t* index, float scale, float* dlogits,
                     float* dhidden, double* row_loss, int* row_correct) {
  __shared__ float h[kHidden];
  __shared__ float z[kClasses];
  __shared__ float dz[kClasses];
  const int r = blockIdx.x, j = threadIdx.x;
  h[j] = hidden[r * kHidden + j];
  __syncthreads();
  if (j < kClasses) {
    float a = 0.0f;
    for (int k = 0; k < kHidden; ++k) a = fmaf(h[k], w2[j * kHidden + k], a);
    z[j] = a + b2[j];
  }
  __syncthreads();
  if (j == 0) {
    const int label = labels[index[r]];
    int best = 0;
    for (int i = 1; i < kClasses; ++i)
      if (z[i] > z[best]) best = i;
    const double m = z[best];
    double sum = 0.0;
    for (int i = 0; i < kClasses; ++i) sum += exp(double(z[i]) - m);
    const double lse = m + log(sum);
    for (int i = 0; i < kClasses; ++i) {
      const double p = exp(double(z[i]) - lse);
      dz[i] = static_cast<float>((p - (i == label ? 1.0 : 0.0)) * scale);
      dlogits[r * kClasses + i] = dz[i];
    }
    row_loss[r] = lse - z[label];
    row_correct[r] = best == label;
  }
  __syncthreads();
  float g = 0.0f;
  for (int o = 0; o < kClasses; ++o) g = fmaf(dz[o], w2[o * kHidden + j], g);
  dhidden[r * kHidden + j] = h[j] > 0.0f ? g : 0.0f;
}

// One block per output channel c: the conv kernel and bias gradients of channel c, summed
// over every image and cell, reduced in a fixed tree.
__global__ void ConvBackwardParams(const float* images, const uint32_t* index,
                                   const float* pooled, const uint8_t* argmax,
                                   const float* dpooled, int rows, float* dconv) {
  constexpr int kThreads = 256;
  __shared__ float partial[10][kThreads];
  const int c = blockIdx.x;
  float acc[10] = {};
  for (int i = threadIdx.x; i < rows * 169; i += kThreads) {
    const int r = i / 169, cell = i % 169;
    const size_t at = static_cast<size_t>(r) * kFlat + cell * 32 + c;
    if (!(pooled[at] > 0.0f)) continue;
    const float g = dpooled[at];
    const int d = argmax[at], py = cell / 13, px = cell % 13;
    const int oy = 2 * py + (d >> 1), ox = 2 * px + (d & 1);
    const float* img = images + static_cast<size_t>(index[r]) * kInputPixels;
    for (int ky = 0; ky < 3; ++ky)
      for (int kx = 0; kx < 3; ++kx) acc[ky * 3 + kx] = fmaf(img[(oy + ky) * 28 + ox + kx], g, acc[ky * 3 + kx]);
    acc[9] += g;
  }
  for (int t = 0; t < 10; ++t) partial[t][threadIdx.x] = acc[t];
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      for (int t = 0; t < 10; ++t) partial[t][threadIdx.x] += partial[t][threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x < 9) dconv[threadIdx.x * 32 + c] = partial[threadIdx.x][0];
  if (threadIdx.x == 9) dconv[288 + c] = partial[9][0];
}

// db1, dW2, db2: small sums over the rows, in row order.
__global__ void SmallGradients(const float* hidden, const float* dlogits, const float* dhidden,
                               int rows, float* grad) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < kHidden) {
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s += dhidden[r * kHidden + t];
    grad[Layout::kDense1Bias + t] = s;
  } else if (t < kHidden + kClasses * kHidden) {
    const int i = t - kHidden, o = i / kHidden, j = i % kHidden;
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s = fmaf(dlogits[r * kClasses + o], hidden[r * kHidden + j], s);
    grad[Layout::kDense2Kernel + i] = s;
  } else if (t < kHidden + kClasses * kHidden + kClasses) {
    const int o = t - kHidden - kClasses * kHidden;
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s += dlogits[r * kClasses + o];
    grad[Layout::kDense2Bias + o] = s;
  }
}

__global__ void Adam(float* w, const float* g, float* m, float* v, int n, float alpha,
                     float one_minus_b1, float one_minus_b2, float eps) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i];
  m[i] += (gi - m[i]) * one_minus_b1;
  v[i] += (gi * gi - v[i]) * one_minus_b2;
  w[i] -= alpha * m[i] / (sqrtf(v[i]) + eps);
}

template <typename T>
Status Alloc(T** p, size_t count) {
  TJ_CUDA(cudaMalloc(reinterpret_cast<void**>(p), count * sizeof(T)));
  return Status::Ok();
}

class GpuStepImpl final : public GpuStep {
 public:
  ~GpuStepImpl() override {
    if (blas_) cublasDestroy(blas_);
    for (void* p : owned_) cudaFree(p);
  }

  Status Init(const float* images, const uint8_t* labels, int count, int max_rows, int device) {
    max_rows_ = max_rows;
    TJ_CUDA(cudaSetDevice(device));
    TJ_CUBLAS(cublasCreate(&blas_));
    // Full-precision float32 GEMMs: no TF32, so the GPU computes what the CPU computes.
    TJ_CUBLAS(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH));
    TJ_RETURN_IF_ERROR(Own(&images_, size_t(count) * kInputPixels));
    TJ_RETURN_IF_ERROR(Own(&labels_, size_t(count)));
    TJ_CUDA(cudaMemcpy(images_, images, size_t(count) * kInputPixels * sizeof(float), cudaMemcpyHostToDevice));
    TJ_CUDA(cudaMemcpy(labels_, labels, size_t(count), cudaMemcpyHostToDevice));
    TJ_RETURN_IF_ERROR(Own(&params_, Layout::kCount));
    TJ_RETURN_IF_ERROR(Own(&grad_, Layout::kCount));
    TJ_RETURN_IF_ERROR(Own(&m_, Layout::kCount));
    TJ_RETURN_IF_ERROR(Own(&v_, Layout::kCount));
    TJ_CUDA(cudaMemset(m_, 0, Layout::kCount * sizeof(float)));
    TJ_CUDA(cudaMemset(v_, 0, Layout::kCount * sizeof(float)));
    const size_t rows = size_t(max_rows);
    TJ_RETURN_IF_ERROR(Own(&index_, rows));
    TJ_RETURN_IF_ERROR(Own(&pooled_, rows * kFlat));
    TJ_RETURN_IF_ERROR(Own(&argmax_, rows * kFlat));
    TJ_RETURN_IF_ERROR(Own(&dpooled_, rows * kFlat));
    TJ_RETURN_IF_ERROR(Own(&hidden_, rows * kHidden));
    TJ_RETURN_IF_ERROR(Own(&dhidden_, rows * kHidden));
    TJ_RETURN_IF_ERROR(Own(&dlogits_, rows * kClasses));
    TJ_RETURN_IF_ERROR(Own(&row_loss_, rows));
    TJ_RETURN_IF_ERROR(Own(&row_correct_, rows));
    host_loss_.resize(rows);
    host_correct_.resize(rows);
    return Status::Ok();
  }

  Status SetParameters(const std::vector<float>& p) override {
    if (p.size() != Layout::kCount) return Status::Error("GPU backend: wrong parameter count");
    TJ_CUDA(cudaMemcpy(params_, p.data(), p.size() * sizeof(float), cudaMemcpyHostToDevice));
    return Status::Ok();
  }
  Status GetParameters(std::vector<float>* p) override { return Download(params_, p); }
  Status GetGradients(std::vector<float>* g) override { return Download(grad_, g); }
  float* device_gradients() override { return grad_; }

  Status ComputeGradients(const uint32_t* index, int rows, float scale, double* loss_sum,
                          int* correct) override {
    if (rows < 1 || rows > max_rows_) return Status::Error("GPU backend: batch size out of range");
    TJ_CUDA(cudaMemcpy(index_, index, size_t(rows) * sizeof(uint32_t), cudaMemcpyHostToDevice));
    const float* p = params_;
    ConvReluPoolForward<<<rows, 256>>>(images_, index_, p + Layout::kConvKernel,
                                       p + Layout::kConvBias, pooled_, argmax_);
    const float one = 1.0f, zero = 0.0f;
    // hidden (col-major 64 x rows) = W1 (row-major 64 x 5408, i.e. col-major 5408 x 64)^T . pooled
    TJ_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, kHidden, rows, kFlat, &one,
                          p + Layout::kDense1Kernel, kFlat, pooled_, kFlat, &zero, hidden_, kHidden));
    BiasRelu<<<(rows * kHidden + 255) / 256, 256>>>(hidden_, p + Layout::kDense1Bias, rows);
    Head<<<rows, kHidden>>>(hidden_, p + Layout::kDense2Kernel, p + Layout::kDense2Bias, labels_,
                            index_, scale, dlogits_, dhidden_, row_loss_, row_correct_);
    // dpooled (col-major 5408 x rows) = W1 (col-major 5408 x 64) . dhidden (64 x rows)
    TJ_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, kFlat, rows, kHidden, &one,
                          p + Layout::kDense1Kernel, kFlat, dhidden_, kHidden, &zero, dpooled_, kFlat));
    // dW1 (col-major 5408 x 64) = pooled (5408 x rows) . dhidden^T (rows x 64)
    TJ_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_T, kFlat, kHidden, rows, &one, pooled_,
                          kFlat, dhidden_, kHidden, &zero, grad_ + Layout::kDense1Kernel, kFlat));
    ConvBackwardParams<<<32, 256>>>(images_, index_, pooled_, argmax_, dpooled_, rows,
                                    grad_ + Layout::kConvKernel);
    const int small = kHidden + kClasses * kHidden + kClasses;
    SmallGradients<<<(small + 255) / 256, 256>>>(hidden_, dlogits_, dhidden_, rows, grad_);
    TJ_CUDA(cudaGetLastError());
    TJ_CUDA(cudaMemcpy(host_loss_.data(), row_loss_, size_t(rows) * sizeof(double), cudaMemcpyDeviceToHost));
    TJ_CUDA(cudaMemcpy(host_correct_.data(), row_correct_, size_t(rows) * sizeof(int), cudaMemcpyDeviceToHost));
    *loss_sum = 0.0;
    *correct = 0;
    for (int r = 0; r < rows; ++r) {
      *loss_sum += host_loss_[r];
      *correct += host_correct_[r];
    }
    return Status::Ok();
  }

  Status ApplyAdam(double lr, int64_t t) override {
    const double alpha = lr * std::sqrt(1.0 - std::pow(0.999, double(t))) / (1.0 - std::pow(0.9, double(t)));
    const int n = static_cast<int>(Layout::kCount);
    Adam<<<(n + 255) / 256, 256>>>(params_, grad_, m_, v_, n, static_cast<float>(alpha),
                                   1.0f - 0.9f, 1.0f - 0.999f, 1e-7f);
    TJ_CUDA(cudaGetLastError());
    return Status::Ok();
  }

 private:
  template <typename T>
  Status Own(T** p, size_t count) {
    TJ_RETURN_IF_ERROR(Alloc(p, count));
    owned_.push_back(*p);
    return Status::Ok();
  }
  Status Download(const float* src, std::vector<float>* out) {
    out->resize(Layout::kCount);
    TJ_CUDA(cudaMemcpy(out->data(), src, Layout::kCount * sizeof(float), cudaMemcpyDeviceToHost));
    return Status::Ok();
  }

  int max_rows_ = 0;
  cublasHandle_t blas_ = nullptr;
  std::vector<void*> owned_;
  float* images_ = nullptr;
  uint8_t* labels_ = nullptr;
  float *params_ = nullptr, *grad_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  uint32_t* index_ = nullptr;
  float *pooled_ = nullptr, *dpooled_ = nullptr, *hidden_ = nullptr, *dhidden_ = nullptr,
        *dlogits_ = nullptr;
  uint8_t* argmax_ = nullptr;
  double* row_loss_ = nullptr;
  int* row_correct_ = nullptr;
  std::vector<double> host_loss_;
  std::vector<int> host_correct_;
};

}  // namespace

int VisibleDevices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

StatusOr<std::unique_ptr<GpuStep>> GpuStep::Create(const float* images, const uint8_t* labels,
                                                   int count, int max_rows, int device) {
  if (VisibleDevices() == 0) return Status::Error("no CUDA device is visible");
  auto step = std::make_unique<GpuStepImpl>();
  Status s = step->Init(images, labels, count, max_rows, device);
  if (!s.ok()) return s.WithContext("initialising the GPU backend");
  return std::unique_ptr<GpuStep>(std::move(step));
}

}  // namespace tj::cuda
