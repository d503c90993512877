#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "trainer/cuda/cuda_check.h"
#include "trainer/cuda/gpu_step.h"
#include "trainer/cuda/kernel_math.h"
#include "trainer/cuda/launch_geometry.h"
#include "trainer/nn/model.h"
#ifdef TJ_HAVE_CUDNN
#include "trainer/cuda/cudnn_conv.h"
#endif

namespace tj::cuda {
namespace {

using nn::kClasses;
using nn::kFlat;
using nn::kHidden;
using nn::kInputPixels;
using nn::Layout;

// Adam's constants as the CPU's nn::AdamConfig holds them (float), so that the device computes
// the same step size from the same numbers.
constexpr float kBeta1 = 0.9f;
constexpr float kBeta2 = 0.999f;
constexpr float kEpsilon = 1e-7f;

#define TJ_CUBLAS(call)                                                                         \
  TJ_CHECK_LIBRARY_CALL("cuBLAS", cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusString, \
                        call)

// ---- Kernels. Sums run in a fixed order (no atomics), so results are deterministic. Each
// maps its threads to elements and calls the element's math in kernel_math.h (which the CPU
// unit tests run); the launches take their shapes from launch_geometry.h.

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
    const size_t at = static_cast<size_t>(r) * kFlat + o;
    math::ConvPoolOutput(img, sw, sb, o, &pooled[at], &argmax[at]);
  }
}

// hidden[r][j] = relu(hidden[r][j] + bias[j]) after the cuBLAS product.
__global__ void BiasRelu(float* hidden, const float* bias, int rows) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * kHidden) return;
  hidden[i] = math::BiasRelu(hidden[i], bias[i % kHidden]);
}

// One block of 64 threads per row: dense2, softmax cross-entropy, dlogits, dhidden.
__global__ void Head(const float* hidden, const float* w2, const float* b2, const uint8_t* labels,
                     const uint32_t* index, float scale, float* dlogits, float* dhidden,
                     double* row_loss, int* row_correct) {
  __shared__ float h[kHidden];
  __shared__ float z[kClasses];
  __shared__ float dz[kClasses];
  const int r = blockIdx.x, j = threadIdx.x;
  h[j] = hidden[r * kHidden + j];
  __syncthreads();
  if (j < kClasses) z[j] = math::Logit(h, w2, b2, j);
  __syncthreads();
  if (j == 0) {
    row_loss[r] = math::SoftmaxCrossEntropy(z, labels[index[r]], scale, dz, &row_correct[r]);
    for (int i = 0; i < kClasses; ++i) dlogits[r * kClasses + i] = dz[i];
  }
  __syncthreads();
  dhidden[r * kHidden + j] = math::HiddenGradient(h, dz, w2, j);
}

// One block per output channel c: the conv kernel and bias gradients of channel c, summed
// over every image and cell, reduced in a fixed tree.
__global__ void ConvBackwardParams(const float* images, const uint32_t* index, const float* pooled,
                                   const uint8_t* argmax, const float* dpooled, int rows,
                                   float* dconv) {
  constexpr int kThreads = kConvBackwardThreads;
  __shared__ float partial[10][kThreads];
  const int c = blockIdx.x;
  float acc[10] = {};
  for (int i = threadIdx.x; i < rows * 169; i += kThreads) {
    const int r = i / 169, cell = i % 169;
    const size_t at = static_cast<size_t>(r) * kFlat + cell * 32 + c;
    math::ConvBackwardCell(images + static_cast<size_t>(index[r]) * kInputPixels, pooled[at],
                           dpooled[at], argmax[at], cell, acc);
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
  if (t >= math::kSmallGradients) return;
  size_t offset = 0;
  const float g = math::SmallGradient(t, hidden, dlogits, dhidden, rows, &offset);
  grad[offset] = g;
}

// index[r] = order[*slice + r]: the step's rows, read from the device-resident epoch order at
// the device-resident slice start, so that a replayed graph needs nothing from the host.
__global__ void GatherSlice(const uint32_t* order, const int64_t* slice, int rows,
                            uint32_t* index) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) index[r] = order[*slice + r];
}

// The batch's loss sum (double, in row order, as the CPU sums it) and number correct, stored
// as floats after the gradients so that they ride along in the all-reduce.
__global__ void BatchTail(const double* row_loss, const int* row_correct, int rows, float* tail) {
  double loss = 0.0;
  int correct = 0;
  for (int r = 0; r < rows; ++r) {
    loss += row_loss[r];
    correct += row_correct[r];
  }
  tail[0] = static_cast<float>(loss);
  tail[1] = static_cast<float>(correct);
}

// One thread: adds the (all-reduced) tail to the epoch sums, counts the iteration, computes
// Adam's step size for it and moves the slice on.
__global__ void AdvanceStep(const float* tail, const double* learning_rate, double* sums,
                            int64_t* iterations, float* alpha, int64_t* slice,
                            int64_t slice_stride) {
  sums[0] += tail[0];
  sums[1] += tail[1];
  const double t = static_cast<double>(++*iterations);
  *alpha = math::AdamStepSize(*learning_rate, t, kBeta1, kBeta2);
  *slice += slice_stride;
}

__global__ void Adam(float* w, const float* g, float* m, float* v, int n, const float* alpha,
                     float one_minus_b1, float one_minus_b2, float eps) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  math::AdamUpdate(&w[i], g[i], &m[i], &v[i], *alpha, one_minus_b1, one_minus_b2, eps);
}

// A captured CUDA graph, instantiated; replayed with Launch().
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() { Reset(); }
  void Reset() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
  }
  bool ready() const { return exec_ != nullptr; }
  // Captures what `enqueue` puts on `stream` (nothing runs during capture).
  template <typename Enqueue>
  Status Capture(cudaStream_t stream, Enqueue enqueue) {
    Reset();
    TJ_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    Status inner = enqueue();
    cudaError_t end = cudaStreamEndCapture(stream, &graph_);
    TJ_RETURN_IF_ERROR(inner);
    if (end != cudaSuccess) {
      return Status::Error(std::string("CUDA: cudaStreamEndCapture: ") + cudaGetErrorString(end));
    }
    TJ_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
    return Status::Ok();
  }
  Status Launch(cudaStream_t stream) {
    TJ_CUDA(cudaGraphLaunch(exec_, stream));
    return Status::Ok();
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// TJ_GPU_GRAPHS=0 enqueues every step's kernels directly instead of replaying graphs (to
// measure what the graphs save, or to rule them out when debugging).
bool GraphsEnabled() {
  const char* v = std::getenv("TJ_GPU_GRAPHS");
  return !(v && std::string(v) == "0");
}

// TJ_GPU_CONV=own (default) | cudnn: which convolution the step uses (to measure both).
StatusOr<bool> UseCudnnConv() {
  const char* v = std::getenv("TJ_GPU_CONV");
  const std::string conv = v ? v : "own";
  if (conv == "own") return false;
  if (conv != "cudnn") {
    return Status::Error("TJ_GPU_CONV=" + conv + ": expected own (the fused kernel) or cudnn");
  }
#ifdef TJ_HAVE_CUDNN
  return true;
#else
  return Status::Error(
      "TJ_GPU_CONV=cudnn: this build has no cuDNN; unset it or rebuild with cuDNN");
#endif
}

constexpr size_t kReduceCount = Layout::kCount + 2;
constexpr size_t kCublasWorkspaceBytes = size_t{4} << 20;

class GpuStepImpl final : public GpuStep {
 public:
  ~GpuStepImpl() override {
    if (stream_) cudaStreamSynchronize(stream_);
    gradients_graph_.Reset();
    update_graph_.Reset();
    if (blas_) cublasDestroy(blas_);
    for (void* p : owned_) cudaFree(p);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Init(const float* images, const uint8_t* labels, int count, int max_rows, int device) {
    if (count < 1 || max_rows < 1) return Status::Error("GPU backend: no images or an empty batch");
    count_ = count;
    max_rows_ = max_rows;
    use_graphs_ = GraphsEnabled();
    auto cudnn = UseCudnnConv();
    if (!cudnn.ok()) return cudnn.status();
    TJ_CUDA(cudaSetDevice(device));
    TJ_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TJ_CUBLAS(cublasCreate(&blas_));
    TJ_CUBLAS(cublasSetStream(blas_, stream_));
    // Full-precision float32 GEMMs: no TF32, so the GPU computes what the CPU computes.
    TJ_CUBLAS(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH));
    // A workspace of our own: cuBLAS must not allocate while a graph is being captured.
    TJ_RETURN_IF_ERROR(Own(&blas_workspace_, kCublasWorkspaceBytes));
    TJ_CUBLAS(cublasSetWorkspace(blas_, blas_workspace_, kCublasWorkspaceBytes));
    TJ_RETURN_IF_ERROR(Own(&images_, size_t(count) * kInputPixels));
    TJ_RETURN_IF_ERROR(Own(&labels_, size_t(count)));
    TJ_RETURN_IF_ERROR(Upload(images_, images, size_t(count) * kInputPixels));
    TJ_RETURN_IF_ERROR(Upload(labels_, labels, size_t(count)));
    TJ_RETURN_IF_ERROR(Own(&order_, size_t(count)));
    TJ_RETURN_IF_ERROR(Own(&params_, Layout::kCount));
    TJ_RETURN_IF_ERROR(Own(&grad_, kReduceCount));
    TJ_RETURN_IF_ERROR(Own(&m_, Layout::kCount));
    TJ_RETURN_IF_ERROR(Own(&v_, Layout::kCount));
    TJ_RETURN_IF_ERROR(Own(&sums_, 2));
    TJ_RETURN_IF_ERROR(Own(&iterations_, 1));
    TJ_RETURN_IF_ERROR(Own(&slice_, 1));
    TJ_RETURN_IF_ERROR(Own(&learning_rate_, 1));
    TJ_RETURN_IF_ERROR(Own(&alpha_, 1));
    TJ_CUDA(cudaMemset(grad_, 0, kReduceCount * sizeof(float)));
    TJ_CUDA(cudaMemset(m_, 0, Layout::kCount * sizeof(float)));
    TJ_CUDA(cudaMemset(v_, 0, Layout::kCount * sizeof(float)));
    TJ_CUDA(cudaMemset(sums_, 0, 2 * sizeof(double)));
    TJ_CUDA(cudaMemset(iterations_, 0, sizeof(int64_t)));
    TJ_CUDA(cudaMemset(slice_, 0, sizeof(int64_t)));
    TJ_CUDA(cudaMemset(learning_rate_, 0, sizeof(double)));
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
#ifdef TJ_HAVE_CUDNN
    if (*cudnn) {
      auto conv = CudnnConv::Create(max_rows, stream_);
      if (!conv.ok()) return conv.status();
      cudnn_conv_ = std::move(*conv);
    }
#endif
    TJ_CUDA(cudaDeviceSynchronize());
    return Status::Ok();
  }

  Status SetParameters(const std::vector<float>& p) override {
    TJ_RETURN_IF_ERROR(CheckCount(p, "parameters"));
    return Upload(params_, p.data(), p.size());
  }
  Status GetParameters(std::vector<float>* p) override { return Download(params_, p); }
  Status GetGradients(std::vector<float>* g) override { return Download(grad_, g); }

  Status SetOptimizerState(const std::vector<float>& m, const std::vector<float>& v,
                           int64_t iterations) override {
    TJ_RETURN_IF_ERROR(CheckCount(m, "Adam m"));
    TJ_RETURN_IF_ERROR(CheckCount(v, "Adam v"));
    TJ_RETURN_IF_ERROR(Upload(m_, m.data(), m.size()));
    TJ_RETURN_IF_ERROR(Upload(v_, v.data(), v.size()));
    return Upload(iterations_, &iterations, 1);
  }
  Status GetOptimizerState(std::vector<float>* m, std::vector<float>* v,
                           int64_t* iterations) override {
    TJ_RETURN_IF_ERROR(Download(m_, m));
    TJ_RETURN_IF_ERROR(Download(v_, v));
    return DownloadTo(iterations, iterations_, 1);
  }
  Status SetEpochSums(double loss_sum, double correct) override {
    const double sums[2] = {loss_sum, correct};
    return Upload(sums_, sums, 2);
  }
  Status GetEpochSums(double* loss_sum, double* correct) override {
    double sums[2];
    TJ_RETURN_IF_ERROR(DownloadTo(sums, sums_, 2));
    *loss_sum = sums[0];
    *correct = sums[1];
    return Status::Ok();
  }

  Status BeginEpoch(const uint32_t* order, int count, int64_t first_slice, int64_t slice_stride,
                    double learning_rate) override {
    if (count < 1 || count > count_) {
      return Status::Error("GPU backend: an epoch order of " + std::to_string(count) +
                           " indices for " + std::to_string(count_) + " images on the device");
    }
    if (first_slice < 0 || slice_stride < 0) {
      return Status::Error("GPU backend: negative slice start or stride");
    }
    // The previous epoch's replays read order_ and the scalars: finish them first.
    TJ_RETURN_IF_ERROR(Synchronize());
    TJ_RETURN_IF_ERROR(Upload(order_, order, size_t(count)));
    order_count_ = count;
    TJ_RETURN_IF_ERROR(Upload(slice_, &first_slice, 1));
    TJ_RETURN_IF_ERROR(Upload(learning_rate_, &learning_rate, 1));
    if (slice_stride != slice_stride_) update_graph_.Reset();  // the stride is baked in
    slice_stride_ = slice_stride;
    return Status::Ok();
  }

  Status EnqueueGradients(float scale) override {
    if (order_count_ == 0) return Status::Error("GPU backend: EnqueueGradients before BeginEpoch");
    auto enqueue = [&]() -> Status {
      const LaunchShape gather = Elementwise(max_rows_);
      GatherSlice<<<gather.grid, gather.block, 0, stream_>>>(order_, slice_, max_rows_, index_);
      TJ_RETURN_IF_ERROR(EnqueueForwardBackward(max_rows_, scale));
      BatchTail<<<OneThread().grid, OneThread().block, 0, stream_>>>(
          row_loss_, row_correct_, max_rows_, grad_ + Layout::kCount);
      TJ_CUDA(cudaGetLastError());
      return Status::Ok();
    };
    if (!use_graphs_) return enqueue();
    if (!gradients_graph_.ready() || scale != graph_scale_) {
      TJ_RETURN_IF_ERROR(gradients_graph_.Capture(stream_, enqueue));
      graph_scale_ = scale;
    }
    return gradients_graph_.Launch(stream_);
  }

  Status EnqueueUpdate() override {
    if (order_count_ == 0) return Status::Error("GPU backend: EnqueueUpdate before BeginEpoch");
    auto enqueue = [&]() -> Status { return EnqueueAdvanceAndAdam(); };
    if (!use_graphs_) return enqueue();
    if (!update_graph_.ready()) TJ_RETURN_IF_ERROR(update_graph_.Capture(stream_, enqueue));
    return update_graph_.Launch(stream_);
  }

  std::string convolution() const override {
#ifdef TJ_HAVE_CUDNN
    if (cudnn_conv_) return "cudnn";
#endif
    return "own";
  }
  float* reduce_buffer() override { return grad_; }
  void* stream() override { return stream_; }
  Status Synchronize() override {
    TJ_CUDA(cudaStreamSynchronize(stream_));
    TJ_CUDA(cudaGetLastError());
    return Status::Ok();
  }

  Status ComputeGradients(const uint32_t* index, int rows, float scale, double* loss_sum,
                          int* correct) override {
    if (rows < 1 || rows > max_rows_) return Status::Error("GPU backend: batch size out of range");
    for (int r = 0; r < rows; ++r) {
      if (index[r] >= static_cast<uint32_t>(count_)) {
        return Status::Error("GPU backend: image index " + std::to_string(index[r]) +
                             " out of range (" + std::to_string(count_) + " images)");
      }
    }
    TJ_RETURN_IF_ERROR(Upload(index_, index, size_t(rows)));
    TJ_RETURN_IF_ERROR(EnqueueForwardBackward(rows, scale));
    BatchTail<<<OneThread().grid, OneThread().block, 0, stream_>>>(row_loss_, row_correct_, rows,
                                                                   grad_ + Layout::kCount);
    TJ_CUDA(cudaGetLastError());
    std::vector<double> host_loss(rows);
    std::vector<int> host_correct(rows);
    TJ_RETURN_IF_ERROR(DownloadTo(host_loss.data(), row_loss_, size_t(rows)));
    TJ_RETURN_IF_ERROR(DownloadTo(host_correct.data(), row_correct_, size_t(rows)));
    *loss_sum = 0.0;
    *correct = 0;
    for (int r = 0; r < rows; ++r) {
      *loss_sum += host_loss[r];
      *correct += host_correct[r];
    }
    return Status::Ok();
  }

  Status ApplyAdam(double learning_rate, int64_t iteration) override {
    if (iteration < 1) return Status::Error("GPU backend: Adam iterations count from 1");
    const int64_t before = iteration - 1;
    TJ_RETURN_IF_ERROR(Upload(iterations_, &before, 1));
    TJ_RETURN_IF_ERROR(Upload(learning_rate_, &learning_rate, 1));
    TJ_RETURN_IF_ERROR(EnqueueAdvanceAndAdam());
    return Synchronize();
  }

 private:
  // The forward and backward kernels over index_[0..rows), on stream_.
  Status EnqueueForwardBackward(int rows, float scale) {
    const float* p = params_;
#ifdef TJ_HAVE_CUDNN
    if (cudnn_conv_) {
      TJ_RETURN_IF_ERROR(cudnn_conv_->Forward(images_, index_, rows, p + Layout::kConvKernel,
                                              p + Layout::kConvBias, pooled_, argmax_));
    } else
#endif
    {
      const LaunchShape conv = ConvForwardPerImage(rows);
      ConvReluPoolForward<<<conv.grid, conv.block, 0, stream_>>>(
          images_, index_, p + Layout::kConvKernel, p + Layout::kConvBias, pooled_, argmax_);
    }
    const float one = 1.0f, zero = 0.0f;
    // hidden (col-major 64 x rows) = W1 (row-major 64 x 5408, i.e. col-major 5408 x 64)^T . pooled
    TJ_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, kHidden, rows, kFlat, &one,
                          p + Layout::kDense1Kernel, kFlat, pooled_, kFlat, &zero, hidden_,
                          kHidden));
    const LaunchShape bias = Elementwise(static_cast<size_t>(rows) * kHidden);
    BiasRelu<<<bias.grid, bias.block, 0, stream_>>>(hidden_, p + Layout::kDense1Bias, rows);
    const LaunchShape head = HeadPerRow(rows);
    Head<<<head.grid, head.block, 0, stream_>>>(hidden_, p + Layout::kDense2Kernel,
                                                p + Layout::kDense2Bias, labels_, index_, scale,
                                                dlogits_, dhidden_, row_loss_, row_correct_);
    // dpooled (col-major 5408 x rows) = W1 (col-major 5408 x 64) . dhidden (64 x rows)
    TJ_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, kFlat, rows, kHidden, &one,
                          p + Layout::kDense1Kernel, kFlat, dhidden_, kHidden, &zero, dpooled_,
                          kFlat));
    // dW1 (col-major 5408 x 64) = pooled (5408 x rows) . dhidden^T (rows x 64)
    TJ_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_T, kFlat, kHidden, rows, &one, pooled_,
                          kFlat, dhidden_, kHidden, &zero, grad_ + Layout::kDense1Kernel, kFlat));
#ifdef TJ_HAVE_CUDNN
    if (cudnn_conv_) {
      TJ_RETURN_IF_ERROR(cudnn_conv_->BackwardParams(pooled_, argmax_, dpooled_, rows,
                                                     grad_ + Layout::kConvKernel));
    } else
#endif
    {
      const LaunchShape dconv = ConvBackwardPerChannel();
      ConvBackwardParams<<<dconv.grid, dconv.block, 0, stream_>>>(
          images_, index_, pooled_, argmax_, dpooled_, rows, grad_ + Layout::kConvKernel);
    }
    const LaunchShape small = Elementwise(math::kSmallGradients);
    SmallGradients<<<small.grid, small.block, 0, stream_>>>(hidden_, dlogits_, dhidden_, rows,
                                                            grad_);
    TJ_CUDA(cudaGetLastError());
    return Status::Ok();
  }

  Status EnqueueAdvanceAndAdam() {
    AdvanceStep<<<OneThread().grid, OneThread().block, 0, stream_>>>(
        grad_ + Layout::kCount, learning_rate_, sums_, iterations_, alpha_, slice_, slice_stride_);
    const int n = static_cast<int>(Layout::kCount);
    const LaunchShape adam = Elementwise(static_cast<size_t>(n));
    Adam<<<adam.grid, adam.block, 0, stream_>>>(params_, grad_, m_, v_, n, alpha_, 1.0f - kBeta1,
                                                1.0f - kBeta2, kEpsilon);
    TJ_CUDA(cudaGetLastError());
    return Status::Ok();
  }

  static Status CheckCount(const std::vector<float>& x, const char* what) {
    if (x.size() == Layout::kCount) return Status::Ok();
    return Status::Error(std::string("GPU backend: ") + what + " has " + std::to_string(x.size()) +
                         " floats; the model has " + std::to_string(Layout::kCount));
  }
  template <typename T>
  Status Own(T** p, size_t count) {
    TJ_CUDA(cudaMalloc(reinterpret_cast<void**>(p), count * sizeof(T)));
    owned_.push_back(*p);
    return Status::Ok();
  }
  // Copies on stream_ (which does not synchronise with the legacy default stream), complete
  // when these return: after the work already queued, before any queued later.
  template <typename T>
  Status Upload(T* dst, const T* src, size_t count) {
    TJ_CUDA(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyHostToDevice, stream_));
    return Synchronize();
  }
  template <typename T>
  Status DownloadTo(T* dst, const T* src, size_t count) {
    TJ_CUDA(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyDeviceToHost, stream_));
    return Synchronize();
  }
  Status Download(const float* src, std::vector<float>* out) {
    out->resize(Layout::kCount);
    return DownloadTo(out->data(), src, Layout::kCount);
  }

  int count_ = 0;
  int max_rows_ = 0;
  int order_count_ = 0;
  int64_t slice_stride_ = 0;
  bool use_graphs_ = true;
  float graph_scale_ = 0.0f;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::vector<void*> owned_;
  uint8_t* blas_workspace_ = nullptr;
  float* images_ = nullptr;
  uint8_t* labels_ = nullptr;
  uint32_t* order_ = nullptr;
  float *params_ = nullptr, *grad_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  double* sums_ = nullptr;
  int64_t* iterations_ = nullptr;
  int64_t* slice_ = nullptr;
  double* learning_rate_ = nullptr;
  float* alpha_ = nullptr;
  uint32_t* index_ = nullptr;
  float *pooled_ = nullptr, *dpooled_ = nullptr, *hidden_ = nullptr, *dhidden_ = nullptr,
        *dlogits_ = nullptr;
  uint8_t* argmax_ = nullptr;
  double* row_loss_ = nullptr;
  int* row_correct_ = nullptr;
  Graph gradients_graph_;
  Graph update_graph_;
#ifdef TJ_HAVE_CUDNN
  std::unique_ptr<CudnnConv> cudnn_conv_;  // set: the convolution goes through cuDNN
#endif
};

}  // namespace

int VisibleDevices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

std::string NoDeviceReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) {
    if (n > 0) return "";
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return std::string("the driver reports no device (CUDA_VISIBLE_DEVICES=") +
           (visible != nullptr ? visible : "(unset)") + ")";
  }
  // The runtime says "insufficient driver" also when there is no driver at all.
  if (e == cudaErrorInsufficientDriver) {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) return "no NVIDIA driver on this machine (no libcuda.so.1)";
    dlclose(driver);
  }
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

std::string DeviceDescription(int device) {
  cudaDeviceProp prop{};
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    return std::to_string(device) + " (unknown: " + cudaGetErrorString(e) + ")";
  }
  return std::to_string(device) + " " + prop.name + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + std::to_string(prop.totalGlobalMem >> 20) + " MiB)";
}

StatusOr<std::unique_ptr<GpuStep>> GpuStep::Create(const float* images, const uint8_t* labels,
                                                   int count, int max_rows, int device) {
  const int visible = VisibleDevices();
  if (visible == 0) return Status::Error("no CUDA device is visible");
  if (device < 0 || device >= visible) {
    return Status::Error("CUDA device " + std::to_string(device) + " requested but " +
                         std::to_string(visible) +
                         " visible: check LOCAL_RANK / CUDA_VISIBLE_DEVICES");
  }
  auto step = std::make_unique<GpuStepImpl>();
  Status s = step->Init(images, labels, count, max_rows, device);
  if (!s.ok())
    return s.WithContext("initialising the GPU backend on device " + DeviceDescription(device));
  return std::unique_ptr<GpuStep>(std::move(step));
}

}  // namespace tj::cuda
