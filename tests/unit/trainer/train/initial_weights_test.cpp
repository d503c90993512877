// --initial-weights and frozen layers in the trainer: a Keras .weights.h5 read into the model's
// layout (the export's own copy, which Keras' save_weights also writes), its digest in the
// backups' fingerprint, the refusals naming the flag; and the declared backend's step leaving a
// frozen layer's parameters bitwise as they were while the rest train.
#include "trainer/train/initial_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>

#include "common/sha256.h"
#include "tests/support/synthetic_dataset.h"
#include "tests/support/temp_dir.h"
#include "trainer/data/epoch_order.h"
#include "trainer/train/export.h"
#include "trainer/train/fingerprint.h"
#include "trainer/train/step_backend.h"

namespace tj::train {
namespace {

using tj::testing::TempDir;

DeclaredModel Example(const std::string& name) {
  auto m = LoadDeclaredModel(std::string(TJ_SOURCE_DIR) + "/examples/models/" + name + ".json");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : DeclaredModel{};
}

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

// start, start + 1, ...: every weight distinct, so one read into another's place shows.
std::vector<float> Ramp(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(InitialWeights, TheExportsKerasFileStartsARunAndJoinsTheFingerprint) {
  const DeclaredModel trained = Example("bn_dropout_cnn");
  const std::vector<float> weights = Ramp(trained.graph.parameter_count, 0.5f);
  const std::vector<float> state = Ramp(trained.graph.state_count, 2.0f);
  TempDir dir;
  ASSERT_TRUE(ExportDeclaredModel(dir.Join("m"), trained, weights, state, 1).ok());
  const std::string file = dir.Join("m/") + kKerasWeightsFile;

  DeclaredModel m = Example("bn_dropout_cnn");
  ASSERT_TRUE(LoadInitialWeights(file, &m).ok());
  EXPECT_EQ(m.initial_params, weights);
  EXPECT_EQ(m.initial_state, state);
  const std::string bytes = ReadAll(file);
  EXPECT_EQ(m.initial_weights_sha256, ToHex(Sha256Of(bytes.data(), bytes.size())));

  data::Dataset d;
  d.digest = "x";
  Options o;
  const DeclaredModel fresh = Example("bn_dropout_cnn");
  const nlohmann::json with = TrainingFingerprint(o, 1, d, &m);
  const nlohmann::json without = TrainingFingerprint(o, 1, d, &fresh);
  EXPECT_EQ(with["initial_weights_sha256"], m.initial_weights_sha256);
  EXPECT_FALSE(without.contains("initial_weights_sha256"));
  auto refusal = ResumeRefusal(with, without);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_NE(refusal->find("initial_weights_sha256"), std::string::npos) << *refusal;
  EXPECT_FALSE(ResumeRefusal(with, with).has_value());
}

TEST(InitialWeights, RefusalsNameTheFlagAndTheFile) {
  TempDir dir;
  DeclaredModel m = Example("bn_dropout_cnn");
  Status s = LoadInitialWeights(dir.Join("none.weights.h5"), &m);
  EXPECT_TRUE(
      Contains(s, "--initial-weights " + dir.Join("none.weights.h5") + ": cannot open the file"))
      << s.message();
  std::ofstream(dir.Join("text.weights.h5")) << "not hdf5";
  s = LoadInitialWeights(dir.Join("text.weights.h5"), &m);
  EXPECT_TRUE(Contains(s, "text.weights.h5: not an HDF5 file")) << s.message();
  // Another model's weights: the seeds' CNN's conv has 32 filters, this one's 16.
  const DeclaredModel seeds = Example("seeds_cnn");
  ASSERT_TRUE(ExportDeclaredModel(dir.Join("seeds"), seeds,
                                  std::vector<float>(seeds.graph.parameter_count, 0.0f), {}, 1)
                  .ok());
  s = LoadInitialWeights(dir.Join("seeds/") + kKerasWeightsFile, &m);
  EXPECT_TRUE(Contains(s,
                       "layers/conv2d (layer Conv2D 'conv'): variable 0 (conv/kernel, shape "
                       "(3, 3, 1, 16)) has shape (3, 3, 1, 32) in the file"))
      << s.message();
  EXPECT_TRUE(m.initial_weights_sha256.empty());
}

// Three steps of bn_dropout_cnn with conv and dense1 frozen, trained by `training` (its
// optimizer state zeros): every frozen tensor keeps its bits, every other one moves.
void ExpectFrozenLayersKeepTheirBits(const DeclaredTraining& training) {
  std::string text = Example("bn_dropout_cnn").text;
  nlohmann::json spec = nlohmann::json::parse(text);
  for (auto& layer : spec["config"]["layers"]) {
    if (layer["config"]["name"] == "conv" || layer["config"]["name"] == "dense1")
      layer["config"]["trainable"] = false;
  }
  TempDir dir;
  std::ofstream(dir.Join("frozen.json")) << spec.dump();
  auto m = LoadDeclaredModel(dir.Join("frozen.json"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  static const data::Dataset dataset = tj::testing::SyntheticDataset(64);
  std::vector<uint8_t> pixels(dataset.train.images.size());
  for (size_t i = 0; i < pixels.size(); ++i) {
    pixels[i] = static_cast<uint8_t>(std::clamp(dataset.train.images[i], 0.0f, 1.0f) * 255.0f);
  }
  auto images = data::InMemoryDataset::Create(
      "synthetic", {28, 28, 1}, 10, std::move(pixels),
      std::vector<int32_t>(dataset.train.labels.begin(), dataset.train.labels.end()));
  ASSERT_TRUE(images.ok()) << images.status().message();
  constexpr int kBatch = 4;
  nn::ThreadPool pool(1);
  DeclaredInput input;
  input.dataset = images->get();
  input.steps_per_epoch = 3;
  auto backend = MakeDeclaredCpuBackend(*m, input, kBatch, &pool, nn::cpu::BestKernels(),
                                        {.first = 0, .count = 1, .total = 1}, 5, training);
  const size_t count = m->graph.parameter_count;
  const bool adam = training.recipe.optimizer == OptimizerKind::kAdam;
  const ModelState initial{
      .params = model::InitialParameters(m->graph, 5),
      .adam_m = std::vector<float>(adam ? count : 0, 0.0f),
      .adam_v = std::vector<float>(adam ? count : 0, 0.0f),
      .iterations = 0,
      .model_state = model::InitialState(m->graph),
      .sgd_momentum = std::vector<float>(training.recipe.momentum > 0.0 ? count : 0, 0.0f)};
  ASSERT_TRUE(backend->SetState(initial).ok());
  ASSERT_TRUE(
      backend->BeginEpoch(1, data::EpochOrder(5, 1, dataset.train.count), 0, kBatch, 1e-3).ok());
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(backend->ComputeGradients(1.0f / kBatch).ok());
    ASSERT_TRUE(backend->ApplyUpdate().ok());
  }
  auto after = backend->GetState();
  ASSERT_TRUE(after.ok());
  for (const model::Layer& layer : m->graph.layers) {
    for (const model::Tensor& t : layer.params) {
      const bool same = std::memcmp(initial.params.data() + t.offset,
                                    after->params.data() + t.offset, t.size * sizeof(float)) == 0;
      EXPECT_EQ(same, !layer.trainable) << t.name;
    }
  }
}

TEST(FrozenLayers, TheStepLeavesAFrozenLayersParametersBitwise) {
  ExpectFrozenLayersKeepTheirBits({});
}

// Weight decay passes frozen layers by (as Keras decays trainable variables only), and SGD's
// momentum of a zero gradient stays zero.
TEST(FrozenLayers, SgdWithMomentumAndWeightDecayLeavesThemBitwiseToo) {
  DeclaredTraining sgd{.recipe = {}, .total_steps = 3};
  sgd.recipe.optimizer = OptimizerKind::kSgd;
  sgd.recipe.momentum = 0.9;
  sgd.recipe.nesterov = true;
  sgd.recipe.weight_decay = 0.1;
  sgd.recipe.lr_schedule = "cosine:0.05";
  ExpectFrozenLayersKeepTheirBits(sgd);
  sgd.recipe.optimizer = OptimizerKind::kAdam;  // AdamW
  sgd.recipe.momentum = 0.0;
  sgd.recipe.nesterov = false;
  ExpectFrozenLayersKeepTheirBits(sgd);
}

}  // namespace
}  // namespace tj::train
