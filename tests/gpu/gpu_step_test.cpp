// The GPU step against the CPU step on fresh random inputs: every kernel through the layer
// it computes (conv+ReLU+pool forward and the conv gradient: conv_kernel/conv_bias; cuBLAS
// and BiasRelu: dense1_*; Head: loss, correct, dense2_*; SmallGradients: the biases and
// dense2_kernel; Adam). Bounds: float32 with different summation orders (cuBLAS vs our
// kernels) gives relative differences around 1e-6..1e-5 per element; we allow 1e-3 of the
// layer gradient's largest magnitude per element, 1e-4 relative on the loss sum.
#include "trainer/cuda/gpu_step.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/random.h"
#include "tests/gpu/gpu_require.h"
#include "trainer/nn/adam.h"
#include "trainer/nn/cpu_step.h"
#include "trainer/nn/model.h"

namespace tj::cuda {
namespace {

using nn::Layout;

struct RandomData {
  std::vector<float> images;
  std::vector<uint8_t> labels;
  std::vector<uint32_t> index;
};

RandomData MakeData(int count, int rows, uint64_t seed) {
  RandomData d;
  SplitMix64 rng(seed);
  d.images.resize(static_cast<size_t>(count) * 784);
  for (float& x : d.images) x = rng.NextFloat();
  for (int i = 0; i < count; ++i) d.labels.push_back(static_cast<uint8_t>(rng.Below(10)));
  for (int r = 0; r < rows; ++r) d.index.push_back(static_cast<uint32_t>(rng.Below(count)));
  return d;
}

void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu, size_t begin,
                 size_t count, const char* name) {
  float scale = 0.0f;
  for (size_t i = begin; i < begin + count; ++i) scale = std::max(scale, std::abs(cpu[i]));
  for (size_t i = begin; i < begin + count; ++i) {
    ASSERT_NEAR(gpu[i], cpu[i], 1e-3f * scale + 1e-9f) << name << " index " << i - begin;
  }
}

// One step on `gpu` (created over d's images) against the CPU step: the loss sum, the number
// correct and every layer's gradient.
void ExpectStepMatchesTheCpu(GpuStep* gpu, const RandomData& d, uint64_t params_seed) {
  const int rows = static_cast<int>(d.index.size());
  std::vector<float> params = nn::InitialParameters(params_seed);
  ASSERT_TRUE(gpu->SetParameters(params).ok());
  double gpu_loss = 0;
  int gpu_correct = 0;
  Status st = gpu->ComputeGradients(d.index.data(), rows, 1.0f / rows, &gpu_loss, &gpu_correct);
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<float> g_gpu;
  ASSERT_TRUE(gpu->GetGradients(&g_gpu).ok());

  nn::ThreadPool pool(2);
  nn::CpuStep cpu(rows, &pool);
  std::vector<float> g_cpu(Layout::kCount);
  nn::BatchStats s =
      cpu.ComputeGradients(params.data(), {d.images.data(), d.labels.data(), d.index.data(), rows},
                           1.0f / rows, g_cpu.data());
  EXPECT_NEAR(gpu_loss, s.loss_sum, 1e-4 * s.loss_sum);
  EXPECT_EQ(gpu_correct, s.correct);
  ExpectClose(g_gpu, g_cpu, Layout::kConvKernel, 288, "conv_kernel");
  ExpectClose(g_gpu, g_cpu, Layout::kConvBias, 32, "conv_bias");
  ExpectClose(g_gpu, g_cpu, Layout::kDense1Kernel, size_t{64} * nn::kFlat, "dense1_kernel");
  ExpectClose(g_gpu, g_cpu, Layout::kDense1Bias, 64, "dense1_bias");
  ExpectClose(g_gpu, g_cpu, Layout::kDense2Kernel, 640, "dense2_kernel");
  ExpectClose(g_gpu, g_cpu, Layout::kDense2Bias, 10, "dense2_bias");
}

TEST(GpuStepTest, GradientsMatchTheCpuBackend) {
  TJ_REQUIRE_GPU();
  RandomData d = MakeData(500, 64, 1);
  auto gpu = GpuStep::Create(d.images.data(), d.labels.data(), 500, 64);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  EXPECT_EQ((*gpu)->convolution(), "own");
  ExpectStepMatchesTheCpu(gpu->get(), d, 5);
}

TEST(GpuStepTest, TrainingStepsMatchTheCpuBackend) {
  TJ_REQUIRE_GPU();
  const int rows = 64;
  RandomData d = MakeData(500, rows, 2);
  std::vector<float> params = nn::InitialParameters(6);
  auto gpu = GpuStep::Create(d.images.data(), d.labels.data(), 500, rows);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  ASSERT_TRUE((*gpu)->SetParameters(params).ok());
  nn::ThreadPool pool(2);
  nn::CpuStep cpu(rows, &pool);
  nn::Adam adam(Layout::kCount);
  std::vector<float> g(Layout::kCount), cpu_params = params;
  for (int t = 1; t <= 5; ++t) {
    double loss;
    int correct;
    ASSERT_TRUE((*gpu)->ComputeGradients(d.index.data(), rows, 1.0f / rows, &loss, &correct).ok());
    ASSERT_TRUE((*gpu)->ApplyAdam(1e-3, t).ok());
    cpu.ComputeGradients(cpu_params.data(),
                         {d.images.data(), d.labels.data(), d.index.data(), rows}, 1.0f / rows,
                         g.data());
    adam.Apply(cpu_params.data(), g.data(), 1e-3, &pool);
  }
  std::vector<float> gpu_params;
  ASSERT_TRUE((*gpu)->GetParameters(&gpu_params).ok());
  // After 5 Adam steps of size ~1e-3 the weights agree to a small fraction of a step.
  for (size_t i = 0; i < Layout::kCount; ++i) ASSERT_NEAR(gpu_params[i], cpu_params[i], 2e-4f) << i;
}

// TJ_GPU_CONV=cudnn: the same step with cuDNN's convolution against the CPU, same bounds.
TEST(GpuStepTest, CudnnConvolutionMatchesTheCpuBackend) {
  TJ_REQUIRE_GPU();
  RandomData d = MakeData(500, 64, 3);
  setenv("TJ_GPU_CONV", "cudnn", 1);
  auto gpu = GpuStep::Create(d.images.data(), d.labels.data(), 500, 64);
  unsetenv("TJ_GPU_CONV");
  if (!gpu.ok() && gpu.status().message().find("no cuDNN") != std::string::npos) {
    GTEST_SKIP() << gpu.status().message();
  }
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  EXPECT_EQ((*gpu)->convolution(), "cudnn");
  ExpectStepMatchesTheCpu(gpu->get(), d, 7);
}

}  // namespace
}  // namespace tj::cuda
