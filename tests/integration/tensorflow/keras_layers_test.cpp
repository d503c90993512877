// The declared-model engine against TensorFlow's Keras on the same models, parameters and
// inputs: the cases keras_layers.py writes (keras_layers_test.sh runs both). Per case: the
// outputs (logits, or probabilities where the model ends in softmax), the mean loss, the
// gradient of every trainable tensor and of the inputs, and the state after the pass
// (BatchNormalization's moving statistics). Each is compared as the largest difference
// relative to the largest magnitude of Keras' tensor (float32 rounding in another summation
// order; TensorFlow's oneDNN kernels sum in their own), within 1e-4, or the case's own
// tolerance where keras_layers.py gives one (an ill-conditioned whole model, with the reason
// there). Skips without TJ_KERAS_CASES.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "trainer/model/cpu_engine.h"
#include "trainer/model/graph.h"

namespace tj::model {
namespace {

template <typename T>
std::vector<T> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<T> values(bytes.size() / sizeof(T));
  // An empty file (a model without weights) gives no values, and no memcpy from null.
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// max |got - want| / max(max |want|, floor) over count elements.
double RelativeError(const float* got, const float* want, size_t count, double floor = 1e-30) {
  double diff = 0.0, largest = floor;
  for (size_t i = 0; i < count; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    largest = std::max(largest, std::abs(static_cast<double>(want[i])));
  }
  return diff / largest;
}

constexpr double kTolerance = 1e-4;

TEST(KerasLayersTest, TheEngineComputesWhatKerasComputes) {
  const char* dir = std::getenv("TJ_KERAS_CASES");
  if (dir == nullptr) GTEST_SKIP() << "TJ_KERAS_CASES is not set: run keras_layers_test.sh";
  const nlohmann::json manifest =
      nlohmann::json::parse(ReadText(std::string(dir) + "/manifest.json"));
  std::printf("Keras %s, TensorFlow %s; errors relative to the largest magnitude of each tensor\n",
              manifest["keras"].get<std::string>().c_str(),
              manifest["tensorflow"].get<std::string>().c_str());
  std::printf("%-34s %9s %9s %9s %9s %9s  %s\n", "case", "outputs", "loss", "grads", "d input",
              "state", "worst gradient");
  ASSERT_GE(manifest["cases"].size(), 20u);
  double worst_overall = 0.0;
  for (const nlohmann::json& c : manifest["cases"]) {
    const std::string name = c["name"], path = std::string(dir) + "/" + name + "/";
    SCOPED_TRACE(name);
    StatusOr<Graph> g = ParseKerasModel(ReadText(path + "model.json"));
    ASSERT_TRUE(g.ok()) << g.status().message();
    const int rows = c["rows"];
    const double tolerance = c.value("tolerance", kTolerance);
    std::vector<float> params = ReadFile<float>(path + "params.f32");
    std::vector<float> state = ReadFile<float>(path + "state_before.f32");
    const std::vector<float> inputs = ReadFile<float>(path + "inputs.f32");
    const std::vector<uint8_t> bytes = ReadFile<uint8_t>(path + "labels.u8");
    const std::vector<int32_t> labels(bytes.begin(), bytes.end());
    // Keras' weights in the engine's layout, 1:1.
    ASSERT_EQ(params.size(), g->parameter_count);
    ASSERT_EQ(state.size(), g->state_count);
    ASSERT_EQ(inputs.size(), rows * g->input_shape().size());
    std::vector<uint32_t> index(rows);
    for (int r = 0; r < rows; ++r) index[r] = r;
    nn::ThreadPool pool(2);
    CpuEngine engine(*g, rows, &pool);
    std::vector<float> grad(g->parameter_count);
    StepOptions options;
    options.training = c["training"];
    options.input_gradient = true;
    const nn::BatchStats stats = engine.ComputeGradients(
        params.data(), state.data(), {inputs.data(), labels.data(), index.data(), rows},
        1.0f / rows, grad.data(), options);

    const int classes = g->classes();
    std::vector<float> outputs(engine.Output(g->output), engine.Output(g->output) + rows * classes);
    if (c["softmax_output"]) {
      for (int r = 0; r < rows; ++r) {
        float* z = outputs.data() + r * classes;
        const double m = *std::max_element(z, z + classes);
        double sum = 0.0;
        for (int i = 0; i < classes; ++i) sum += std::exp(z[i] - m);
        for (int i = 0; i < classes; ++i) z[i] = static_cast<float>(std::exp(z[i] - m) / sum);
      }
    }
    const std::vector<float> want_out = ReadFile<float>(path + "outputs.f32");
    const std::vector<float> want_grad = ReadFile<float>(path + "grads.f32");
    const std::vector<float> want_dx = ReadFile<float>(path + "input_grad.f32");
    const std::vector<float> want_state = ReadFile<float>(path + "state_after.f32");
    ASSERT_EQ(want_out.size(), outputs.size());
    ASSERT_EQ(want_grad.size(), grad.size());
    const double out_err = RelativeError(outputs.data(), want_out.data(), outputs.size());
    const double loss = c["loss"];
    const double loss_err = std::abs(stats.loss_sum / rows - loss) / std::abs(loss);
    // A tensor whose true gradient is 0 (a bias before BatchNormalization in training) is
    // compared against 1e-2 of the case's largest gradient instead of its own rounding noise.
    double floor = 0.0;
    for (float v : want_grad) floor = std::max(floor, 1e-2 * std::abs(v));
    double grad_err = 0.0;
    std::string worst_tensor;
    for (const Layer& l : g->layers) {
      for (const Tensor& t : l.params) {
        const double e =
            RelativeError(grad.data() + t.offset, want_grad.data() + t.offset, t.size, floor);
        EXPECT_LE(e, tolerance) << t.name;
        if (e >= grad_err) {
          grad_err = e;
          worst_tensor = t.name;
        }
      }
    }
    const double dx_err = RelativeError(engine.InputGradient(), want_dx.data(), want_dx.size());
    const double state_err = RelativeError(state.data(), want_state.data(), state.size());
    EXPECT_LE(out_err, tolerance);
    EXPECT_LE(loss_err, tolerance);
    EXPECT_LE(dx_err, tolerance);
    EXPECT_LE(state_err, tolerance);
    std::printf("%-34s %9.1e %9.1e %9.1e %9.1e %9.1e  %s\n", name.c_str(), out_err, loss_err,
                grad_err, dx_err, state_err, worst_tensor.c_str());
    if (!c.contains("tolerance")) {
      worst_overall = std::max({worst_overall, out_err, loss_err, grad_err, dx_err, state_err});
    } else {
      std::printf("%-34s (%d rows, tolerance %.0e)\n", "", rows, tolerance);
    }
  }
  std::printf("largest relative error over the other cases: %.1e (tolerance %.0e)\n", worst_overall,
              kTolerance);
}

}  // namespace
}  // namespace tj::model
