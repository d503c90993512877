// The GPU backend behind the training loop's seam (graphs, device-resident order, Adam state
// and epoch sums) against the CPU backend, on a synthetic learnable data set: a few hundred
// steps' loss curve, state round trips, a mid-epoch resume, and graphs on vs off.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <numeric>

#include "common/random.h"
#include "tests/gpu/gpu_require.h"
#include "trainer/data/epoch_order.h"
#include "trainer/nn/model.h"
#include "trainer/train/step_backend.h"

namespace tj::train {
namespace {

constexpr int kBatch = 64;

// Noise plus a bright 6x6 square whose place depends on the label: a model learns it in a
// few hundred steps, so the loss curve moves and two curves can be compared.
data::Dataset SyntheticDataset(int count, uint64_t seed) {
  data::Dataset d;
  SplitMix64 rng(seed);
  d.train.count = count;
  d.train.images.resize(static_cast<size_t>(count) * data::kImagePixels);
  for (int i = 0; i < count; ++i) {
    const int label = static_cast<int>(rng.Below(data::kNumClasses));
    d.train.labels.push_back(static_cast<uint8_t>(label));
    float* img = &d.train.images[static_cast<size_t>(i) * data::kImagePixels];
    for (int p = 0; p < data::kImagePixels; ++p) img[p] = 0.3f * rng.NextFloat();
    const int y0 = 2 + (label / 5) * 12, x0 = 1 + (label % 5) * 5;
    for (int y = y0; y < y0 + 6; ++y)
      for (int x = x0; x < x0 + 6 && x < data::kImageSide; ++x)
        img[y * data::kImageSide + x] = 1.0f;
  }
  d.test = d.train;
  d.digest = "synthetic";
  return d;
}

// A synthetic training set of `steps` batches and an epoch order over it.
struct SyntheticEpoch {
  data::Dataset data;
  std::vector<uint32_t> order;
  SyntheticEpoch(int steps, uint64_t seed)
      : data(SyntheticDataset(kBatch * steps, seed)),
        order(data::EpochOrder(seed, 1, data.train.count)) {}
};

ModelState FreshState(uint64_t seed) {
  ModelState state;
  state.params = nn::InitialParameters(seed);
  state.adam_m.assign(nn::Layout::kCount, 0.0f);
  state.adam_v.assign(nn::Layout::kCount, 0.0f);
  return state;
}

// Runs `steps` steps of one epoch from `first_step`; returns the epoch's loss sum after each
// `report_every` steps.
std::vector<double> RunSteps(StepBackend* b, const std::vector<uint32_t>& order, int64_t first_step,
                             int steps, int report_every) {
  std::vector<double> curve;
  EXPECT_TRUE(b->BeginEpoch(1, order, first_step * kBatch, kBatch, 1e-3).ok());
  for (int s = 1; s <= steps; ++s) {
    Status st = b->ComputeGradients(1.0f / kBatch);
    EXPECT_TRUE(st.ok()) << st.message();
    st = b->ApplyUpdate();
    EXPECT_TRUE(st.ok()) << st.message();
    if (report_every > 0 && s % report_every == 0) {
      double loss = 0, correct = 0;
      EXPECT_TRUE(b->GetEpochSums(&loss, &correct).ok());
      curve.push_back(loss);
    }
  }
  EXPECT_TRUE(b->WaitForSteps().ok());
  return curve;
}

std::unique_ptr<StepBackend> Gpu(const data::Dataset& d) {
  auto b = MakeGpuBackend(d, kBatch, 0);
  EXPECT_TRUE(b.ok()) << b.status().message();
  return b.ok() ? std::move(*b) : nullptr;
}

TEST(GpuBackendTest, LossCurveFollowsTheCpuBackendForThreeHundredSteps) {
  TJ_REQUIRE_GPU();
  const SyntheticEpoch e(300, 11);
  const data::Dataset& d = e.data;
  const auto& order = e.order;
  nn::ThreadPool pool(2);
  auto cpu = MakeCpuBackend(d, kBatch, &pool);
  auto gpu = Gpu(d);
  ASSERT_TRUE(gpu);
  ASSERT_TRUE(cpu->SetState(FreshState(7)).ok());
  ASSERT_TRUE(gpu->SetState(FreshState(7)).ok());
  const auto cpu_curve = RunSteps(cpu.get(), order, 0, 300, 50);
  const auto gpu_curve = RunSteps(gpu.get(), order, 0, 300, 50);
  ASSERT_EQ(cpu_curve.size(), gpu_curve.size());
  // Rounding differences grow through 300 Adam steps, but the running loss sum (a mean
  // over thousands of images) must stay within 1% of the CPU's at every point.
  for (size_t i = 0; i < cpu_curve.size(); ++i) {
    EXPECT_NEAR(gpu_curve[i], cpu_curve[i], 0.01 * cpu_curve[i])
        << "after " << 50 * (i + 1) << " steps";
  }
  // And the model learnt: the last 50 steps' mean loss is far below the first 50 steps'.
  const double first = cpu_curve[0] / (50.0 * kBatch);
  const double last = (cpu_curve.back() - cpu_curve[cpu_curve.size() - 2]) / (50.0 * kBatch);
  EXPECT_LT(last, 0.5 * first);
  auto cs = cpu->GetState();
  auto gs = gpu->GetState();
  ASSERT_TRUE(cs.ok() && gs.ok());
  EXPECT_EQ(gs->iterations, 300);
  EXPECT_EQ(cs->iterations, 300);
}

TEST(GpuBackendTest, StateRoundTripsBitwise) {
  TJ_REQUIRE_GPU();
  auto gpu = Gpu(SyntheticDataset(kBatch * 4, 12));
  ASSERT_TRUE(gpu);
  ModelState s = FreshState(9);
  SplitMix64 rng(5);
  for (float& x : s.adam_m) x = rng.NextFloat() - 0.5f;
  for (float& x : s.adam_v) x = rng.NextFloat();
  s.iterations = 1234;
  ASSERT_TRUE(gpu->SetState(s).ok());
  ASSERT_TRUE(gpu->SetEpochSums(12.5, 7.0).ok());
  auto back = gpu->GetState();
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->params, s.params);
  EXPECT_EQ(back->adam_m, s.adam_m);
  EXPECT_EQ(back->adam_v, s.adam_v);
  EXPECT_EQ(back->iterations, 1234);
  double loss = 0, correct = 0;
  ASSERT_TRUE(gpu->GetEpochSums(&loss, &correct).ok());
  EXPECT_EQ(loss, 12.5);
  EXPECT_EQ(correct, 7.0);
  ModelState bad = s;
  bad.params.pop_back();
  Status st = gpu->SetState(bad);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("parameters"), std::string::npos) << st.message();
}

// A run stopped after 10 steps and resumed from its state ends bitwise where an uninterrupted
// 20-step run ends (the device's order, slice, iteration count and sums are all restored).
TEST(GpuBackendTest, MidEpochResumeIsBitwiseTheUninterruptedRun) {
  TJ_REQUIRE_GPU();
  const SyntheticEpoch e(20, 13);
  const data::Dataset& d = e.data;
  auto whole = Gpu(d);
  ASSERT_TRUE(whole);
  ASSERT_TRUE(whole->SetState(FreshState(8)).ok());
  RunSteps(whole.get(), e.order, 0, 20, 0);
  auto first = Gpu(d);
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->SetState(FreshState(8)).ok());
  RunSteps(first.get(), e.order, 0, 10, 0);
  auto saved = first->GetState();
  double loss = 0, correct = 0;
  ASSERT_TRUE(first->GetEpochSums(&loss, &correct).ok());
  ASSERT_TRUE(saved.ok());
  auto second = Gpu(d);
  ASSERT_TRUE(second);
  ASSERT_TRUE(second->SetState(*saved).ok());
  ASSERT_TRUE(second->SetEpochSums(loss, correct).ok());
  RunSteps(second.get(), e.order, 10, 10, 0);
  auto a = whole->GetState();
  auto b = second->GetState();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->params, b->params);
  EXPECT_EQ(a->adam_m, b->adam_m);
  EXPECT_EQ(a->iterations, b->iterations);
  double la = 0, ca = 0, lb = 0, cb = 0;
  ASSERT_TRUE(whole->GetEpochSums(&la, &ca).ok());
  ASSERT_TRUE(second->GetEpochSums(&lb, &cb).ok());
  EXPECT_EQ(la, lb);
  EXPECT_EQ(ca, cb);
}

// The captured graphs compute exactly what the same kernels launched one by one compute.
TEST(GpuBackendTest, GraphReplaysAreBitwiseTheDirectLaunches) {
  TJ_REQUIRE_GPU();
  const SyntheticEpoch e(30, 14);
  auto graphs = Gpu(e.data);
  setenv("TJ_GPU_GRAPHS", "0", 1);
  auto direct = Gpu(e.data);
  unsetenv("TJ_GPU_GRAPHS");
  ASSERT_TRUE(graphs && direct);
  for (StepBackend* b : {graphs.get(), direct.get()}) {
    ASSERT_TRUE(b->SetState(FreshState(10)).ok());
    RunSteps(b, e.order, 0, 30, 0);
  }
  auto a = graphs->GetState();
  auto b = direct->GetState();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->params, b->params);
  EXPECT_EQ(a->adam_v, b->adam_v);
}

}  // namespace
}  // namespace tj::train
