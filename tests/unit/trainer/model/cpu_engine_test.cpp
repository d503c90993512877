// The declared-model engine: every layer type's gradients (parameters and input) against
// central finite differences of a float64 reference forward pass; the same bits for any
// thread count on every SIMD target; the seeds' CNN declared in JSON against the built-in
// model's step.
#include "trainer/model/cpu_engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/random.h"
#include "tests/unit/trainer/model/model_json.h"
#include "tests/unit/trainer/model/reference_graph.h"
#include "trainer/model/graph.h"
#include "trainer/nn/cpu_step.h"
#include "trainer/nn/model.h"

namespace tj::model {
namespace {

using testing::Functional;
using testing::Input;
using testing::json;
using testing::Node;
using testing::Sequential;

json Layer(const std::string& cls, json config) {
  return testing::KerasLayer(cls, std::move(config));
}

// A problem: a graph, parameters with every tensor away from its initial constant, state,
// images and labels.
struct Problem {
  Graph graph;
  std::vector<float> params, state, images;
  std::vector<int32_t> labels;
  std::vector<uint32_t> index;
  int rows = 0;
  model::Batch batch() const { return {images.data(), labels.data(), index.data(), rows}; }
};

Problem MakeProblem(const json& model, int rows, uint64_t seed) {
  Problem p;
  StatusOr<Graph> g = ParseKerasModel(model.dump());
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return p;
  p.graph = *std::move(g);
  p.params = InitialParameters(p.graph, seed);
  p.state = InitialState(p.graph);
  SplitMix64 rng(seed + 100);
  auto uniform = [&](float lo, float hi) { return lo + (hi - lo) * rng.NextFloat(); };
  for (const model::Layer& l : p.graph.layers) {
    for (const Tensor& t : l.params) {
      if (t.init == Init::kUniform) continue;
      for (size_t i = 0; i < t.size; ++i) {
        p.params[t.offset + i] = t.init == Init::kOnes ? uniform(0.7f, 1.3f) : uniform(-0.1f, 0.1f);
      }
    }
    if (l.type == LayerType::kBatchNorm) {
      for (int c = 0; c < l.out.c; ++c) {
        p.state[l.state[0].offset + c] = uniform(-0.2f, 0.2f);
        p.state[l.state[1].offset + c] = uniform(0.5f, 1.5f);
      }
    }
  }
  p.rows = rows;
  p.images.resize(static_cast<size_t>(rows) * p.graph.input_shape().size());
  for (float& x : p.images) x = uniform(-1.0f, 1.0f);
  for (int r = 0; r < rows; ++r) {
    p.labels.push_back(static_cast<int32_t>(rng.Below(p.graph.classes())));
    p.index.push_back(r);
  }
  return p;
}

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

struct Case {
  const char* name;
  json model;
  bool training = true;
};

json Conv(const char* name, int filters, int k, const json& extra = json::object()) {
  json c = {{"name", name}, {"filters", filters}, {"kernel_size", {k, k}}};
  c.update(extra);
  return Layer("Conv2D", c);
}
json Flatten() { return Layer("Flatten", {{"name", "flatten"}}); }
json Head(int units = 5) { return Layer("Dense", {{"name", "head"}, {"units", units}}); }

// One case per layer type and option the engine has code for; each ends in Flatten + Dense
// (or GlobalAveragePooling2D + Dense) so that the loss is defined.
std::vector<Case> Cases() {
  json bn = {{"name", "bn"}, {"epsilon", 0.01}, {"momentum", 0.9}};
  std::vector<Case> cases = {
      {"conv_valid_relu_bias",
       Sequential(
           {Input(7, 7, 3), Conv("conv", 4, 3, {{"activation", "relu"}}), Flatten(), Head()})},
      {"conv_same_stride2_nobias_relu6", Sequential({Input(7, 6, 2),
                                                     Conv("conv", 3, 3,
                                                          {{"strides", 2},
                                                           {"padding", "same"},
                                                           {"use_bias", false},
                                                           {"activation", "relu6"}}),
                                                     Flatten(), Head()})},
      {"conv_groups2_same",
       Sequential({Input(5, 5, 4), Conv("conv", 6, 3, {{"groups", 2}, {"padding", "same"}}),
                   Flatten(), Head()})},
      {"conv_1x1_strided_4x2",
       Sequential({Input(6, 6, 3), Conv("conv", 4, 1, {{"strides", {2, 1}}}),
                   Conv("conv2", 2, 2, {{"kernel_size", {2, 3}}}), Flatten(), Head()})},
      {"depthwise_same_dm2_relu6", Sequential({Input(6, 6, 3),
                                               Layer("DepthwiseConv2D", {{"name", "dw"},
                                                                         {"kernel_size", 3},
                                                                         {"padding", "same"},
                                                                         {"depth_multiplier", 2},
                                                                         {"activation", "relu6"}}),
                                               Flatten(), Head()})},
      {"depthwise_valid_stride2_nobias",
       Sequential({Input(7, 7, 4),
                   Layer("DepthwiseConv2D",
                         {{"name", "dw"}, {"kernel_size", 3}, {"strides", 2}, {"use_bias", false}}),
                   Flatten(), Head()})},
      {"batchnorm_training", Sequential({Input(5, 5, 3), Conv("conv", 4, 3),
                                         Layer("BatchNormalization", bn), Flatten(), Head()})},
      {"batchnorm_inference",
       Sequential({Input(5, 5, 3), Conv("conv", 4, 3), Layer("BatchNormalization", bn), Flatten(),
                   Head()}),
       false},
      {"batchnorm_no_scale_no_center_flat",
       Sequential(
           {Input(4, 4, 2), Flatten(), Layer("Dense", {{"name", "d"}, {"units", 6}}),
            Layer("BatchNormalization", {{"name", "bn"}, {"scale", false}, {"center", false}}),
            Head()})},
      {"maxpool_2_valid",
       Sequential({Input(6, 6, 3), Layer("MaxPooling2D", {{"name", "pool"}, {"pool_size", 2}}),
                   Flatten(), Head()})},
      {"maxpool_3_stride2_same",
       Sequential({Input(7, 7, 2),
                   Layer("MaxPooling2D",
                         {{"name", "pool"}, {"pool_size", 3}, {"strides", 2}, {"padding", "same"}}),
                   Flatten(), Head()})},
      {"avgpool_2_valid",
       Sequential({Input(6, 5, 3), Layer("AveragePooling2D", {{"name", "pool"}, {"pool_size", 2}}),
                   Flatten(), Head()})},
      {"avgpool_3_stride2_same",
       Sequential({Input(7, 7, 2),
                   Layer("AveragePooling2D",
                         {{"name", "pool"}, {"pool_size", 3}, {"strides", 2}, {"padding", "same"}}),
                   Flatten(), Head()})},
      {"global_average_pool",
       Sequential({Input(5, 4, 6), Layer("GlobalAveragePooling2D", {{"name", "gap"}}), Head()})},
      {"global_average_pool_keepdims",
       Sequential({Input(5, 4, 6),
                   Layer("GlobalAveragePooling2D", {{"name", "gap"}, {"keepdims", true}}),
                   Flatten(), Head()})},
      {"dense_relu_unpadded_nobias",
       Sequential(
           {Input(3, 3, 5), Flatten(),
            Layer("Dense",
                  {{"name", "d"}, {"units", 7}, {"activation", "relu"}, {"use_bias", false}}),
            Head()})},
      {"dense_relu6_softmax_output",
       Sequential({Input(1, 1, 40), Flatten(),
                   Layer("Dense", {{"name", "d"}, {"units", 9}, {"activation", "relu6"}}),
                   Layer("Dense", {{"name", "head"}, {"units", 4}, {"activation", "softmax"}})})},
      {"dropout_training",
       Sequential({Input(4, 4, 2), Flatten(), Layer("Dropout", {{"name", "drop"}, {"rate", 0.4}}),
                   Head()})},
      {"dropout_inference",
       Sequential({Input(4, 4, 2), Flatten(), Layer("Dropout", {{"name", "drop"}, {"rate", 0.4}}),
                   Head()}),
       false},
      {"activation_layers",
       Sequential(
           {Input(4, 4, 3), Conv("conv", 3, 1),
            Layer("Activation", {{"name", "a"}, {"activation", "relu"}}), Conv("conv2", 3, 1),
            Layer("ReLU", {{"name", "r"}, {"max_value", 0.3}}), Conv("conv3", 3, 1),
            Layer("Activation", {{"name", "a6"}, {"activation", "relu6"}}), Flatten(), Head()})},
      {"zero_padding_then_strided_depthwise",
       Sequential({Input(6, 6, 3),
                   Layer("ZeroPadding2D", {{"name", "pad"}, {"padding", {{0, 1}, {0, 1}}}}),
                   Layer("DepthwiseConv2D",
                         {{"name", "dw"}, {"kernel_size", 3}, {"strides", 2}, {"use_bias", false}}),
                   Layer("ZeroPadding2D", {{"name", "pad2"}, {"padding", {{2, 1}, {0, 3}}}}),
                   Flatten(), Head()})},
      {"rescaling",
       Sequential({Input(5, 5, 2),
                   Layer("Rescaling", {{"name", "rescale"}, {"scale", 0.5}, {"offset", -0.25}}),
                   Conv("conv", 3, 3), Flatten(), Head()})},
      {"add_residual",
       Functional({Node("InputLayer", {{"name", "x"}, {"batch_shape", {nullptr, 5, 5, 3}}}, {}),
                   Node("Conv2D",
                        {{"name", "c"},
                         {"filters", 3},
                         {"kernel_size", 3},
                         {"padding", "same"},
                         {"activation", "relu"}},
                        {"x"}),
                   Node("Conv2D", {{"name", "c2"}, {"filters", 3}, {"kernel_size", 1}}, {"c"}),
                   Node("Add", {{"name", "add"}}, {"x", "c2", "c"}),
                   Node("Add", {{"name", "twice"}}, {"add", "add"}),
                   Node("Flatten", {{"name", "f"}}, {"twice"}),
                   Node("Dense", {{"name", "out"}, {"units", 4}}, {"f"})},
                  "x", "out")},
  };
  return cases;
}

struct CheckResult {
  int checked = 0;
  double worst = 0.0;  // the largest |analytic - numeric| / (|numeric| + 1e-3)
};

// Central differences of the float64 reference at two step sizes; where they disagree a kink
// (ReLU, max-pool) is within reach and the point is skipped.
void Check(const char* what, double analytic, const std::function<double(double)>& loss_at,
           double at, CheckResult* result) {
  auto central = [&](double h) { return (loss_at(at + h) - loss_at(at - h)) / (2 * h); };
  const double numeric = central(1e-6);
  if (std::abs(numeric - central(4e-6)) > 1e-5 * std::abs(numeric) + 1e-8) return;
  if (std::abs(numeric) < 1e-7) return;
  ++result->checked;
  result->worst =
      std::max(result->worst, std::abs(analytic - numeric) / (std::abs(numeric) + 1e-3));
  EXPECT_NEAR(analytic, numeric, 1e-3 * std::abs(numeric) + 2e-6) << what;
}

TEST(CpuEngineTest, EveryLayerMatchesFiniteDifferences) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const int rows = 4;
    Problem p = MakeProblem(c.model, rows, 17);
    ASSERT_FALSE(p.params.empty());
    nn::ThreadPool pool(2);
    CpuEngine engine(p.graph, rows, &pool, nn::cpu::BestKernels(), /*fuse=*/false);
    std::vector<float> grad(p.graph.parameter_count), state = p.state;
    StepOptions options;
    options.training = c.training;
    options.update_state = false;
    options.dropout_seed = 99;
    options.input_gradient = true;
    const nn::BatchStats stats = engine.ComputeGradients(p.params.data(), state.data(), p.batch(),
                                                         1.0f / rows, grad.data(), options);
    EXPECT_EQ(state, p.state) << "update_state = false wrote the state";

    std::vector<double> params = ToDouble(p.params), ref_state = ToDouble(p.state);
    std::vector<double> images = ToDouble(p.images);
    std::vector<int> labels(p.labels.begin(), p.labels.end());
    const testing::ReferenceOptions ref{c.training, 99};
    const double loss = testing::ReferenceLoss(p.graph, params, ref_state, images, labels, ref);
    EXPECT_NEAR(stats.loss_sum / rows, loss, 2e-6 * std::abs(loss) + 1e-7);

    SplitMix64 rng(5);
    CheckResult result;
    for (const model::Layer& l : p.graph.layers) {
      for (const Tensor& t : l.params) {
        for (int trial = 0; trial < 8; ++trial) {
          const size_t i = t.offset + rng.Below(t.size);
          Check(
              t.name.c_str(), grad[i],
              [&](double v) {
                const double saved = params[i];
                params[i] = v;
                const double out =
                    testing::ReferenceLoss(p.graph, params, ref_state, images, labels, ref);
                params[i] = saved;
                return out;
              },
              params[i], &result);
        }
      }
    }
    const float* dinput = engine.InputGradient();
    for (int trial = 0; trial < 12; ++trial) {
      const size_t i = rng.Below(images.size());
      Check(
          "input", dinput[i],
          [&](double v) {
            const double saved = images[i];
            images[i] = v;
            const double out =
                testing::ReferenceLoss(p.graph, params, ref_state, images, labels, ref);
            images[i] = saved;
            return out;
          },
          images[i], &result);
    }
    EXPECT_GE(result.checked, 10) << "too few points with a gradient to compare";
    std::printf("  %-36s %3d points, largest relative error %.2e\n", c.name, result.checked,
                result.worst);
  }
}

// Training folds the batch's statistics into the moving ones as Keras does.
TEST(CpuEngineTest, BatchNormUpdatesItsMovingStatistics) {
  const int rows = 6;
  Problem p = MakeProblem(
      Sequential({Input(3, 3, 2), Layer("BatchNormalization", {{"name", "bn"}, {"momentum", 0.9}}),
                  Flatten(), Head(3)}),
      rows, 3);
  nn::ThreadPool pool(1);
  CpuEngine engine(p.graph, rows, &pool);
  std::vector<float> grad(p.graph.parameter_count), state = p.state;
  engine.ComputeGradients(p.params.data(), state.data(), p.batch(), 1.0f / rows, grad.data());
  for (int c = 0; c < 2; ++c) {
    double mean = 0.0, var = 0.0;
    const size_t n = p.images.size() / 2;
    for (size_t i = 0; i < n; ++i) mean += p.images[i * 2 + c] / n;
    for (size_t i = 0; i < n; ++i)
      var += (p.images[i * 2 + c] - mean) * (p.images[i * 2 + c] - mean) / n;
    EXPECT_NEAR(state[c], p.state[c] * 0.9 + mean * 0.1, 1e-6);
    EXPECT_NEAR(state[2 + c], p.state[2 + c] * 0.9 + var * 0.1, 1e-6);
  }
}

// The example models and a Dropout one, on every SIMD target this CPU runs: 1, 2 and 3 threads
// give the same loss, gradients, state and outputs to the bit.
TEST(CpuEngineTest, ThreadCountDoesNotChangeABitOnAnyTarget) {
  std::vector<json> models = {
      testing::ExampleModel("seeds_cnn"), testing::ExampleModel("resnet_block"),
      testing::ExampleModel("mobilenet_v2_block"), testing::ExampleModel("resnet20"),
      testing::ExampleModel("mobilenet_v2")};
  const int rows = 13;  // not a multiple of any block size
  for (size_t m = 0; m < models.size(); ++m) {
    Problem p = MakeProblem(models[m], rows, 40 + m);
    for (const std::string& target : nn::cpu::SupportedTargets()) {
      SCOPED_TRACE(p.graph.name + " on " + target);
      const nn::cpu::Kernels& k = **nn::cpu::KernelsFor(target);
      std::vector<std::vector<float>> grads, states, logits;
      std::vector<double> losses;
      for (int threads : {1, 2, 3}) {
        nn::ThreadPool pool(threads);
        CpuEngine engine(p.graph, rows, &pool, k);
        std::vector<float> grad(p.graph.parameter_count), state = p.state;
        StepOptions options;
        options.dropout_seed = 5;
        losses.push_back(engine
                             .ComputeGradients(p.params.data(), state.data(), p.batch(),
                                               1.0f / rows, grad.data(), options)
                             .loss_sum);
        grads.push_back(grad);
        states.push_back(state);
        const float* out = engine.Output(p.graph.output);
        logits.emplace_back(out, out + rows * p.graph.classes());
      }
      for (size_t t = 1; t < grads.size(); ++t) {
        EXPECT_EQ(losses[t], losses[0]);
        EXPECT_TRUE(grads[t] == grads[0]) << "gradients differ at " << t + 1 << " threads";
        EXPECT_TRUE(states[t] == states[0]) << "state differs at " << t + 1 << " threads";
        EXPECT_TRUE(logits[t] == logits[0]) << "logits differ at " << t + 1 << " threads";
      }
    }
  }
}

// The built-in step's parameters in the declared model's layout: dense kernels transposed.
std::vector<float> KerasLayoutOf(const std::vector<float>& builtin) {
  using Lay = nn::Layout;
  std::vector<float> k = builtin;
  for (size_t o = 0; o < 64; ++o)
    for (size_t i = 0; i < nn::kFlat; ++i)
      k[Lay::kDense1Kernel + i * 64 + o] = builtin[Lay::kDense1Kernel + o * nn::kFlat + i];
  for (size_t o = 0; o < 10; ++o)
    for (size_t i = 0; i < 64; ++i)
      k[Lay::kDense2Kernel + i * 10 + o] = builtin[Lay::kDense2Kernel + o * 64 + i];
  return k;
}

// The seeds' CNN from its Keras JSON against the built-in model (trainer/nn/cpu_step.h) with
// the same parameters and images: fused (the default), the same loss and gradients to the bit;
// unfused (im2col + the dense kernels for the conv, a separate max-pool), within float32
// rounding of the summation order.
TEST(CpuEngineTest, TheSeedsCnnFromJsonIsTheBuiltInModel) {
  const int rows = 21;
  StatusOr<Graph> g = LoadKerasModel(testing::ExampleModelPath("seeds_cnn"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::vector<float> builtin = nn::InitialParameters(3);
  SplitMix64 rng(8);
  for (size_t i = nn::Layout::kConvBias; i < nn::Layout::kConvBias + 32; ++i)
    builtin[i] = 0.05f * (2 * rng.NextFloat() - 1);
  for (size_t i = nn::Layout::kDense1Bias; i < nn::Layout::kDense1Bias + 64; ++i)
    builtin[i] = 0.05f * (2 * rng.NextFloat() - 1);
  std::vector<float> images(static_cast<size_t>(rows) * nn::kInputPixels);
  for (float& x : images) x = rng.NextFloat();
  std::vector<uint8_t> labels;
  std::vector<uint32_t> index;
  for (int r = 0; r < rows; ++r) {
    labels.push_back(static_cast<uint8_t>(rng.Below(10)));
    index.push_back(r);
  }
  const nn::Batch batch{images.data(), labels.data(), index.data(), rows};
  const std::vector<int32_t> wide_labels(labels.begin(), labels.end());
  const model::Batch engine_batch{images.data(), wide_labels.data(), index.data(), rows};
  const std::vector<float> params = KerasLayoutOf(builtin);
  for (const std::string& target : nn::cpu::SupportedTargets()) {
    SCOPED_TRACE(target);
    const nn::cpu::Kernels& k = **nn::cpu::KernelsFor(target);
    nn::ThreadPool pool(2);
    nn::CpuStep step(rows, &pool, k);
    std::vector<float> want(nn::Layout::kCount);
    const nn::BatchStats expected =
        step.ComputeGradients(builtin.data(), batch, 1.0f / rows, want.data());
    const std::vector<float> want_keras = KerasLayoutOf(want);

    CpuEngine fused(*g, rows, &pool, k, /*fuse=*/true);
    ASSERT_TRUE(fused.fused());
    std::vector<float> grad(g->parameter_count);
    const nn::BatchStats got =
        fused.ComputeGradients(params.data(), nullptr, engine_batch, 1.0f / rows, grad.data());
    EXPECT_EQ(got.loss_sum, expected.loss_sum);
    EXPECT_EQ(got.correct, expected.correct);
    EXPECT_TRUE(grad == want_keras) << "the fused engine's gradients are not the built-in's";
    const nn::BatchStats evaluated = fused.Evaluate(params.data(), nullptr, engine_batch);
    EXPECT_EQ(evaluated.loss_sum, step.Evaluate(builtin.data(), batch).loss_sum);

    CpuEngine general(*g, rows, &pool, k, /*fuse=*/false);
    ASSERT_FALSE(general.fused());
    std::vector<float> grad2(g->parameter_count);
    const nn::BatchStats got2 =
        general.ComputeGradients(params.data(), nullptr, engine_batch, 1.0f / rows, grad2.data());
    EXPECT_NEAR(got2.loss_sum, expected.loss_sum, 1e-6 * expected.loss_sum);
    EXPECT_EQ(got2.correct, expected.correct);
    for (const model::Layer& l : g->layers) {
      for (const Tensor& t : l.params) {
        double largest = 0.0, diff = 0.0;
        for (size_t i = t.offset; i < t.offset + t.size; ++i) {
          largest = std::max(largest, std::abs(static_cast<double>(want_keras[i])));
          diff = std::max(diff, std::abs(static_cast<double>(grad2[i]) - want_keras[i]));
        }
        EXPECT_LE(diff, 1e-4 * largest) << t.name;
        if (target == nn::cpu::BestKernels().target) {
          std::printf("  unfused %-16s largest |g| %.3e, largest difference %.3e (%.1e of it)\n",
                      t.name.c_str(), largest, diff, diff / largest);
        }
      }
    }
  }
}

TEST(CpuEngineTest, EvaluateInChunksMatchesOnePass) {
  Problem p = MakeProblem(testing::ExampleModel("mobilenet_v2_block"), 11, 4);
  nn::ThreadPool pool(2);
  CpuEngine small(p.graph, 4, &pool), whole(p.graph, 11, &pool);
  const nn::BatchStats a = small.Evaluate(p.params.data(), p.state.data(), p.batch());
  const nn::BatchStats b = whole.Evaluate(p.params.data(), p.state.data(), p.batch());
  EXPECT_EQ(a.rows, 11);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  EXPECT_EQ(a.correct, b.correct);
}

}  // namespace
}  // namespace tj::model
