// Every layer's gradients against central finite differences of a float64 reference model,
// and the fast kernels against the reference on random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/random.h"
#include "tests/unit/trainer/nn/reference_model.h"
#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/cpu_step.h"
#include "trainer/nn/model.h"

namespace tj::nn {
namespace {

struct Problem {
  std::vector<float> params;
  std::vector<float> images;
  std::vector<uint8_t> labels;
  std::vector<uint32_t> index;
};

Problem RandomProblem(int rows, uint64_t seed) {
  Problem p;
  p.params = InitialParameters(seed);
  SplitMix64 rng(seed + 7);
  // Non-zero biases so that their gradients and the ReLU boundaries are exercised.
  for (size_t i : {Layout::kConvBias, Layout::kDense1Bias, Layout::kDense2Bias}) {
    size_t n = i == Layout::kConvBias ? 32 : i == Layout::kDense1Bias ? 64 : 10;
    for (size_t j = 0; j < n; ++j) p.params[i + j] = 0.05f * (2 * rng.NextFloat() - 1);
  }
  p.images.resize(static_cast<size_t>(rows) * kInputPixels);
  for (float& x : p.images) x = rng.NextFloat();
  for (int r = 0; r < rows; ++r) {
    p.labels.push_back(static_cast<uint8_t>(rng.Below(10)));
    p.index.push_back(r);
  }
  return p;
}

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Analytic gradient (float32 kernels, mean loss) vs central differences of the float64
// reference, at parameters sampled from every layer.
TEST(GradientTest, EveryLayerMatchesFiniteDifferences) {
  const int rows = 5;
  Problem p = RandomProblem(rows, 3);
  ThreadPool pool(2);
  CpuStep step(rows, &pool);
  std::vector<float> grad(Layout::kCount);
  Batch batch{p.images.data(), p.labels.data(), p.index.data(), rows};
  step.ComputeGradients(p.params.data(), batch, 1.0f / rows, grad.data());

  std::vector<double> params = ToDouble(p.params);
  std::vector<double> images = ToDouble(p.images);
  std::vector<int> labels(p.labels.begin(), p.labels.end());
  struct Range {
    const char* name;
    size_t begin, count;
  };
  const Range ranges[] = {{"conv_kernel", Layout::kConvKernel, 288},
                          {"conv_bias", Layout::kConvBias, 32},
                          {"dense1_kernel", Layout::kDense1Kernel, size_t{64} * kFlat},
                          {"dense1_bias", Layout::kDense1Bias, 64},
                          {"dense2_kernel", Layout::kDense2Kernel, 640},
                          {"dense2_bias", Layout::kDense2Bias, 10}};
  SplitMix64 rng(11);
  for (const Range& range : ranges) {
    int checked = 0;
    for (int trial = 0; trial < 400 && checked < 12; ++trial) {
      size_t i = range.begin + rng.Below(range.count);
      // Central differences at two step sizes: where they disagree, a ReLU or max-pool kink
      // lies within reach of the step and the loss is not differentiable there; skip it.
      auto central = [&](double h) {
        double saved = params[i];
        params[i] = saved + h;
        double up = testing::ReferenceLoss(params, images, labels);
        params[i] = saved - h;
        double down = testing::ReferenceLoss(params, images, labels);
        params[i] = saved;
        return (up - down) / (2 * h);
      };
      double numeric = central(1e-6);
      if (std::abs(numeric - central(4e-6)) > 1e-5 * std::abs(numeric) + 1e-8) continue;
      if (std::abs(numeric) < 1e-6) continue;  // a dead ReLU or pool loser: nothing to compare
      ++checked;
      EXPECT_NEAR(grad[i], numeric, 1e-3 * std::abs(numeric) + 1e-6)
          << range.name << " index " << i - range.begin;
    }
    EXPECT_GE(checked, 6) << range.name << ": too few parameters with a gradient to compare";
  }
}

TEST(GradientTest, LossMatchesReference) {
  const int rows = 9;
  Problem p = RandomProblem(rows, 5);
  ThreadPool pool(1);
  CpuStep step(4, &pool);  // smaller than the batch: evaluation in chunks
  Batch batch{p.images.data(), p.labels.data(), p.index.data(), rows};
  BatchStats s = step.Evaluate(p.params.data(), batch);
  std::vector<int> labels(p.labels.begin(), p.labels.end());
  double ref = testing::ReferenceLoss(ToDouble(p.params), ToDouble(p.images), labels);
  EXPECT_EQ(s.rows, rows);
  EXPECT_NEAR(s.loss_sum / rows, ref, 1e-5 * std::abs(ref));
}

// For every SIMD target this CPU runs: the same gradients, to the bit, for 1, 2 and 3 threads.
TEST(GradientTest, ThreadCountDoesNotChangeABitOnAnyTarget) {
  const int rows = 37;  // not a multiple of any block size
  Problem p = RandomProblem(rows, 9);
  Batch batch{p.images.data(), p.labels.data(), p.index.data(), rows};
  for (const std::string& target : cpu::SupportedTargets()) {
    SCOPED_TRACE(target);
    const cpu::Kernels& k = **cpu::KernelsFor(target);
    std::vector<float> g1(Layout::kCount), g2(Layout::kCount), g3(Layout::kCount);
    ThreadPool pool1(1), pool2(2), pool3(3);
    CpuStep s1(rows, &pool1, k), s2(rows, &pool2, k), s3(rows, &pool3, k);
    BatchStats a = s1.ComputeGradients(p.params.data(), batch, 1.0f / rows, g1.data());
    BatchStats b = s2.ComputeGradients(p.params.data(), batch, 1.0f / rows, g2.data());
    s3.ComputeGradients(p.params.data(), batch, 1.0f / rows, g3.data());
    EXPECT_EQ(WeightsDigest(g1.data()), WeightsDigest(g2.data()));
    EXPECT_EQ(WeightsDigest(g1.data()), WeightsDigest(g3.data()));
    EXPECT_EQ(a.loss_sum, b.loss_sum);
    EXPECT_EQ(a.correct, b.correct);
  }
}

TEST(KernelTest, SoftmaxCrossEntropyByHand) {
  // logits (0, ln 3): softmax (1/4, 3/4); label 1: loss = -ln(3/4).
  const float logits[2] = {0.0f, static_cast<float>(std::log(3.0))};
  float d[2];
  bool correct = false;
  double loss = cpu::SoftmaxCrossEntropy(logits, 2, 1, 0.5f, d, &correct);
  EXPECT_NEAR(loss, -std::log(0.75), 1e-7);
  EXPECT_NEAR(d[0], 0.25 * 0.5, 1e-7);
  EXPECT_NEAR(d[1], -0.25 * 0.5, 1e-7);
  EXPECT_TRUE(correct);
}

}  // namespace
}  // namespace tj::nn
