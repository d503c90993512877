#include "trainer/nn/adam.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/nn/model.h"

namespace tj::nn {
namespace {

TEST(AdamTest, TwoStepsByHand) {
  // Keras Adam, lr 0.1, one weight w0 = 1 with gradients 0.5 then -0.2.
  ThreadPool pool(1);
  Adam adam(1);
  float w = 1.0f;
  float g = 0.5f;
  adam.Apply(&w, &g, 0.1f, &pool);
  // t=1: m = 0.05, v = 0.00025, alpha = 0.1*sqrt(0.001)/0.1 = 0.0316228
  double m = 0.05, v = 0.00025, alpha = 0.1 * std::sqrt(1 - 0.999) / (1 - 0.9);
  double expected = 1.0 - alpha * m / (std::sqrt(v) + 1e-7);
  EXPECT_NEAR(w, expected, 1e-6);
  g = -0.2f;
  adam.Apply(&w, &g, 0.1f, &pool);
  m = m + (-0.2 - m) * 0.1;
  v = v + (0.04 - v) * 0.001;
  alpha = 0.1 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  expected -= alpha * m / (std::sqrt(v) + 1e-7);
  EXPECT_NEAR(w, expected, 1e-6);
  EXPECT_EQ(adam.iterations(), 2);
}

TEST(AdamTest, ScheduleOfTheSeeds) {
  EXPECT_EQ(LearningRateForEpoch(1), 1e-3);
  EXPECT_EQ(LearningRateForEpoch(3), 1e-3);
  EXPECT_EQ(LearningRateForEpoch(4), 1e-4);
  EXPECT_EQ(LearningRateForEpoch(7), 1e-4);
  EXPECT_EQ(LearningRateForEpoch(8), 1e-5);
  EXPECT_EQ(LearningRateForEpoch(12), 1e-5);
}

TEST(ModelTest, GlorotUniformInitialisation) {
  std::vector<float> p = InitialParameters(42);
  ASSERT_EQ(p.size(), 347146u);
  const double limit = std::sqrt(6.0 / (5408 + 64));
  double sum_sq = 0.0;
  for (size_t i = Layout::kDense1Kernel; i < Layout::kDense1Bias; ++i) {
    ASSERT_LE(std::abs(p[i]), limit);
    sum_sq += static_cast<double>(p[i]) * p[i];
  }
  // Uniform(-l, l) has variance l^2 / 3.
  double var = sum_sq / (Layout::kDense1Bias - Layout::kDense1Kernel);
  EXPECT_NEAR(var, limit * limit / 3, 0.02 * limit * limit / 3);
  for (size_t i = Layout::kConvBias; i < Layout::kConvBias + 32; ++i) EXPECT_EQ(p[i], 0.0f);
  for (size_t i = Layout::kDense2Bias; i < Layout::kCount; ++i) EXPECT_EQ(p[i], 0.0f);
  EXPECT_EQ(WeightsDigest(p.data()), WeightsDigest(InitialParameters(42).data()));
  EXPECT_NE(WeightsDigest(p.data()), WeightsDigest(InitialParameters(43).data()));
}

}  // namespace
}  // namespace tj::nn
