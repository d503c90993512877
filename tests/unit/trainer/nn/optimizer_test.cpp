// SGD (plain, momentum, Nesterov), weight decay and the learning-rate schedules against the
// formulas of Keras 3 (trainer/nn/optimizer.h), worked by hand in double precision.
#include "trainer/nn/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

namespace tj::nn {
namespace {

TEST(SgdTest, PlainMomentumAndNesterovByHand) {
  ThreadPool pool(1);
  const std::vector<float> grads = {0.5f, -0.2f, 0.3f};
  for (const bool nesterov : {false, true}) {
    Sgd sgd(1, {.momentum = 0.9f, .nesterov = nesterov});
    float w = 1.0f;
    double want = 1.0, m = 0.0;
    for (float g : grads) {
      sgd.Apply(&w, &g, 0.1, &pool);
      m = 0.9 * m - 0.1 * g;
      want += nesterov ? 0.9 * m - 0.1 * g : m;
      EXPECT_NEAR(w, want, 1e-6) << (nesterov ? "nesterov" : "momentum");
    }
    EXPECT_EQ(sgd.iterations(), 3);
    ASSERT_EQ(sgd.momentum().size(), 1u);
    EXPECT_NEAR(sgd.momentum()[0], m, 1e-6);
  }
  Sgd plain(1, {});
  float w = 1.0f, g = 0.5f;
  plain.Apply(&w, &g, 0.1, &pool);
  EXPECT_NEAR(w, 0.95, 1e-7);
  EXPECT_TRUE(plain.momentum().empty());  // no state to back up
}

TEST(SgdTest, BitwiseTheSameAtAnyThreadCountAndAfterARestore) {
  const size_t n = 10007;
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = std::sin(static_cast<float>(i)) * 0.01f;
  auto run = [&](int threads, int steps) {
    ThreadPool pool(threads);
    Sgd sgd(n, {.momentum = 0.9f, .nesterov = true});
    std::vector<float> w(n, 0.5f);
    for (int s = 0; s < steps; ++s) sgd.Apply(w.data(), g.data(), 0.05, &pool);
    return std::pair{w, sgd};
  };
  const auto [w1, sgd1] = run(1, 4);
  const auto [w3, sgd3] = run(3, 4);
  EXPECT_EQ(w1, w3);
  // Two steps, a restore into a fresh optimizer, two more: the same bits as four in a row.
  auto [w2, sgd2] = run(1, 2);
  ThreadPool pool(2);
  Sgd resumed(n, {.momentum = 0.9f, .nesterov = true});
  resumed.Restore(sgd2.momentum(), sgd2.iterations());
  for (int s = 0; s < 2; ++s) resumed.Apply(w2.data(), g.data(), 0.05, &pool);
  EXPECT_EQ(w2, w1);
  EXPECT_EQ(resumed.iterations(), 4);
}

TEST(WeightDecayTest, DecaysOnlyTheFlaggedParameters) {
  ThreadPool pool(2);
  std::vector<float> w = {1.0f, 2.0f, -4.0f};
  ApplyWeightDecay(w.data(), w.size(), 1e-2, 0.5, {1, 0, 1}, &pool);
  EXPECT_FLOAT_EQ(w[0], 1.0f - 1.0f * 0.005f);
  EXPECT_FLOAT_EQ(w[1], 2.0f);
  EXPECT_FLOAT_EQ(w[2], -4.0f + 4.0f * 0.005f);
  ApplyWeightDecay(w.data(), w.size(), 1e-2, 0.5, {}, &pool);
  EXPECT_FLOAT_EQ(w[1], 2.0f - 0.01f);
}

TEST(LearningRateScheduleTest, EachKindAsKerasComputesIt) {
  const LearningRateSchedule seeds;
  EXPECT_EQ(seeds.At(1, 0, 100), 1e-3);
  EXPECT_EQ(seeds.At(4, 0, 100), 1e-4);
  EXPECT_EQ(seeds.At(9, 0, 100), 1e-5);
  EXPECT_EQ(seeds.ToString(), "seeds");

  auto constant = LearningRateSchedule::Parse("constant:0.05");
  ASSERT_TRUE(constant.ok()) << constant.status().message();
  EXPECT_EQ(constant->At(7, 123, 1000), 0.05);

  auto step = LearningRateSchedule::Parse("step:0.1@1,0.01@91,0.001@136");
  ASSERT_TRUE(step.ok()) << step.status().message();
  EXPECT_EQ(step->At(1, 0, 0), 0.1);
  EXPECT_EQ(step->At(90, 0, 0), 0.1);
  EXPECT_EQ(step->At(91, 0, 0), 0.01);
  EXPECT_EQ(step->At(200, 0, 0), 0.001);
  EXPECT_EQ(step->ToString(), "step:0.10000000000000001@1,0.01@91,0.001@136");
  EXPECT_FALSE(step->PerStep());

  // keras.optimizers.schedules.CosineDecay(0.0, decay_steps=90, warmup_target=0.1,
  // warmup_steps=10) over a run of 100 steps.
  auto cosine = LearningRateSchedule::Parse("cosine:0.1,warmup=10,alpha=0.1");
  ASSERT_TRUE(cosine.ok()) << cosine.status().message();
  EXPECT_TRUE(cosine->PerStep());
  EXPECT_DOUBLE_EQ(cosine->At(1, 0, 100), 0.0);
  EXPECT_DOUBLE_EQ(cosine->At(1, 5, 100), 0.05);
  EXPECT_DOUBLE_EQ(cosine->At(1, 10, 100), 0.1);
  EXPECT_DOUBLE_EQ(cosine->At(1, 55, 100),
                   0.1 * (0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 45 / 90)) + 0.1));
  EXPECT_DOUBLE_EQ(cosine->At(1, 100, 100), 0.1 * 0.1);
  EXPECT_DOUBLE_EQ(cosine->At(1, 500, 100), 0.1 * 0.1);  // past the end: alpha's floor
  auto reparsed = LearningRateSchedule::Parse(cosine->ToString());
  ASSERT_TRUE(reparsed.ok());
  EXPECT_EQ(reparsed->ToString(), cosine->ToString());
}

TEST(LearningRateScheduleTest, RefusesWhatItCannotRead) {
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"linear:0.1", "unknown schedule 'linear'"},
           {"constant:", "is not a positive number"},
           {"constant:-1", "is not a positive number"},
           {"constant:nan", "is not a positive number"},
           {"step:0.1@2", "must start at epoch 1"},
           {"step:0.1@1,0.01@1", "epochs must increase"},
           {"step:0.1", "is not RATE@EPOCH"},
           {"cosine:0.1,warmup=-3", "warmup=-3"},
           {"cosine:0.1,alpha=2", "alpha '2' is not in [0, 1]"},
           {"cosine:0.1,decay=3", "neither warmup=STEPS nor alpha=A"},
       }) {
    auto s = LearningRateSchedule::Parse(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.status().message().find(says), std::string::npos) << s.status().message();
    EXPECT_NE(s.status().message().find("'" + text + "'"), std::string::npos);
  }
}

}  // namespace
}  // namespace tj::nn
