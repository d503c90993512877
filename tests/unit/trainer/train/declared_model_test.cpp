// A declared model in the trainer (--model-config): reading the file and its digest, the checks
// against the dataset, the fingerprint, the export, and the backend's shards: one replica of
// two shards ends a step with bitwise the parameters and moving statistics of two replicas of
// one shard each (the Dropout masks follow the shard), at any thread count.
#include "trainer/train/declared_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <numeric>

#include "tests/support/temp_dir.h"
#include "trainer/data/dataset.h"
#include "trainer/data/epoch_order.h"
#include "trainer/model/graph.h"
#include "trainer/train/export.h"
#include "trainer/train/fingerprint.h"
#include "trainer/train/step_backend.h"

namespace tj::train {
namespace {

using tj::testing::TempDir;

std::string ExampleModelPath(const std::string& name) {
  return std::string(TJ_SOURCE_DIR) + "/examples/models/" + name + ".json";
}

DeclaredModel Example(const std::string& name) {
  auto m = LoadDeclaredModel(ExampleModelPath(name));
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : DeclaredModel{};
}

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::string path = dir.Join(name);
  std::ofstream(path) << text;
  return path;
}

// Input (h, w, c) -> Flatten -> Dense(units): written as the parser reads Keras 3's JSON.
nlohmann::json Sequential(const std::vector<int>& input, int units) {
  nlohmann::json shape = {nullptr};
  for (int d : input) shape.push_back(d);
  auto layer = [](const std::string& cls, nlohmann::json config) {
    return nlohmann::json{{"class_name", cls}, {"config", std::move(config)}};
  };
  nlohmann::json layers = {layer("InputLayer", {{"name", "input"}, {"batch_shape", shape}})};
  if (input.size() > 1) layers.push_back(layer("Flatten", {{"name", "flatten"}}));
  layers.push_back(layer("Dense", {{"name", "dense"}, {"units", units}}));
  return {{"class_name", "Sequential"}, {"config", {{"name", "m"}, {"layers", layers}}}};
}

// Fashion-MNIST's images, as an IDX dataset names itself.
constexpr data::ImageShape kFashion{28, 28, 1};
const std::string kIdx = "IDX files /data (train)";

bool Contains(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}

TEST(DeclaredModel, TheDigestIsOfTheCanonicalJsonNotOfItsFormatting) {
  TempDir dir;
  const DeclaredModel seeds = Example("seeds_cnn");
  EXPECT_EQ(seeds.graph.parameter_count, nn::Layout::kCount);
  EXPECT_EQ(seeds.sha256.size(), 64u);
  const nlohmann::json parsed = nlohmann::json::parse(seeds.text);
  // Another indentation and key order: the same model, the same digest.
  auto compact = LoadDeclaredModel(Write(dir, "compact.json", parsed.dump()));
  ASSERT_TRUE(compact.ok()) << compact.status().message();
  EXPECT_EQ(compact->sha256, seeds.sha256);
  EXPECT_NE(compact->text, seeds.text);
  // Another layer name: another model.
  nlohmann::json renamed = parsed;
  renamed["config"]["layers"][1]["config"]["name"] = "conv0";
  auto other = LoadDeclaredModel(Write(dir, "renamed.json", renamed.dump()));
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_NE(other->sha256, seeds.sha256);
}

TEST(DeclaredModel, UnreadableFilesAreRefusedNamingTheFlagAndTheFile) {
  TempDir dir;
  const std::string missing = dir.Join("missing.json");
  Status s = LoadDeclaredModel(missing).status();
  EXPECT_TRUE(Contains(s, "--model-config " + missing + ": cannot open the file")) << s.message();
  const std::string deep = Write(dir, "deep.json", std::string(100, '[') + std::string(100, ']'));
  s = LoadDeclaredModel(deep).status();
  EXPECT_TRUE(Contains(s, "--model-config " + deep + ": nested deeper than 64")) << s.message();
  const std::string text = Write(dir, "text.json", "not json");
  s = LoadDeclaredModel(text).status();
  EXPECT_TRUE(Contains(s, "--model-config " + text + ": not JSON")) << s.message();
}

TEST(DeclaredModel, TheExamplesAndAFlatInputFitTheDataset) {
  TempDir dir;
  for (const char* name : {"seeds_cnn", "resnet_block", "mobilenet_v2_block", "bn_dropout_cnn"}) {
    Status s = CheckModelFitsDataset(Example(name), kFashion, 10, kIdx);
    EXPECT_TRUE(s.ok()) << name << ": " << s.message();
  }
  auto flat = LoadDeclaredModel(Write(dir, "flat.json", Sequential({784}, 10).dump()));
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  EXPECT_TRUE(CheckModelFitsDataset(*flat, kFashion, 10, kIdx).ok());
}

TEST(DeclaredModel, AnInputOrOutputThatDoesNotFitIsRefusedNamingBothShapes) {
  TempDir dir;
  auto rgb = LoadDeclaredModel(Write(dir, "rgb.json", Sequential({32, 32, 3}, 10).dump()));
  ASSERT_TRUE(rgb.ok()) << rgb.status().message();
  Status s = CheckModelFitsDataset(*rgb, kFashion, 10, kIdx);
  EXPECT_TRUE(Contains(s, "--model-config " + rgb->path +
                              ": the model's input is (32, 32, 3) and the dataset's images are "
                              "(28, 28, 1) (IDX files /data (train)): declare the "
                              "model's input as keras.Input(shape=(28, 28, 1)), or (784,)"))
      << s.message();
  // Any shape and class count: a model of 32x32x3 images and 12 classes fits such a dataset.
  EXPECT_TRUE(CheckModelFitsDataset(*rgb, {32, 32, 3}, 10, "image folder /x").ok());
  s = CheckModelFitsDataset(*rgb, {32, 32, 3}, 12, "image folder /x");
  EXPECT_TRUE(Contains(s,
                       "the dataset has 12 classes (labels 0-11), which need an output of "
                       "(12,): end the model with Dense(12)"))
      << s.message();
  auto twelve = LoadDeclaredModel(Write(dir, "twelve.json", Sequential({28, 28, 1}, 12).dump()));
  ASSERT_TRUE(twelve.ok()) << twelve.status().message();
  s = CheckModelFitsDataset(*twelve, kFashion, 10, kIdx);
  EXPECT_TRUE(Contains(s,
                       "the model's output is (12,) and the dataset has 10 classes (labels "
                       "0-9), which need an output of (10,): end the model with Dense(10)"))
      << s.message();
  EXPECT_FALSE(Contains(s, "input")) << s.message();
  auto both = LoadDeclaredModel(Write(dir, "both.json", Sequential({27, 28, 1}, 2).dump()));
  ASSERT_TRUE(both.ok()) << both.status().message();
  s = CheckModelFitsDataset(*both, kFashion, 10, kIdx);
  EXPECT_TRUE(Contains(s, "input is (27, 28, 1)")) << s.message();
  EXPECT_TRUE(Contains(s, "; and the model's output is (2,)")) << s.message();
}

TEST(DeclaredModel, AModelWhoseBackupsWouldNotFitAStateFileIsRefused) {
  TempDir dir;
  auto big = LoadDeclaredModel(Write(dir, "big.json", Sequential({784}, 8000).dump()));
  ASSERT_TRUE(big.ok()) << big.status().message();
  // 784 x 8000 + 8000 parameters, no output of 10 either: the shapes are named first.
  Status s = CheckModelFitsDataset(*big, kFashion, 10, kIdx);
  EXPECT_TRUE(Contains(s, "output is (8000,)")) << s.message();
  nlohmann::json wide = Sequential({784}, 8000);
  wide["config"]["layers"].push_back(
      {{"class_name", "Dense"}, {"config", {{"name", "out"}, {"units", 10}}}});
  big = LoadDeclaredModel(Write(dir, "wide.json", wide.dump()));
  ASSERT_TRUE(big.ok()) << big.status().message();
  s = CheckModelFitsDataset(*big, kFashion, 10, kIdx);
  EXPECT_TRUE(Contains(s, "the model has 6360010 parameters, and its backups")) << s.message();
  EXPECT_TRUE(Contains(s, "64 MiB")) << s.message();
}

TEST(DeclaredModel, TheFingerprintNamesTheModelAndTheBuiltInOneIsUnchanged) {
  const DeclaredModel m = Example("bn_dropout_cnn");
  data::Dataset d;
  d.digest = "x";
  Options o;
  const nlohmann::json builtin = TrainingFingerprint(o, 1, d);
  EXPECT_EQ(builtin["model"], "seeds-cnn");
  EXPECT_FALSE(builtin.contains("model_sha256"));
  const nlohmann::json declared = TrainingFingerprint(o, 1, d, &m);
  EXPECT_EQ(declared["model"], "bn_dropout_cnn");
  EXPECT_EQ(declared["model_sha256"], m.sha256);
  EXPECT_EQ(declared["parameters"], m.graph.parameter_count);
  auto refusal = ResumeRefusal(declared, builtin);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_NE(refusal->find("model_sha256"), std::string::npos) << *refusal;
}

TEST(DeclaredModel, AnExportRoundTripsAndAnotherModelsIsRefused) {
  TempDir dir;
  const DeclaredModel m = Example("bn_dropout_cnn");
  std::vector<float> weights(m.graph.parameter_count), state(m.graph.state_count);
  std::iota(weights.begin(), weights.end(), 0.0f);
  std::iota(state.begin(), state.end(), 1.0f);
  ASSERT_TRUE(ExportDeclaredModel(dir.Join("m"), m, weights, state, 2).ok());
  auto back = LoadExportedDeclaredModel(dir.Join("m"), m);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->weights, weights);
  EXPECT_EQ(back->state, state);
  // model.json is the file as given, and reads back as the same model.
  auto again = LoadDeclaredModel(dir.Join("m/model.json"));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->sha256, m.sha256);

  Status s = LoadExportedModel(dir.Join("m")).status();
  EXPECT_TRUE(Contains(s, "the declared model 'bn_dropout_cnn'")) << s.message();
  EXPECT_TRUE(Contains(s, "evaluate it with --model-config " + dir.Join("m") + "/model.json"))
      << s.message();
  s = LoadExportedDeclaredModel(dir.Join("m"), Example("seeds_cnn")).status();
  EXPECT_TRUE(Contains(s, "is 'seeds'")) << s.message();
  ASSERT_TRUE(ExportModel(dir.Join("builtin"), std::vector<float>(nn::Layout::kCount), 1).ok());
  s = LoadExportedDeclaredModel(dir.Join("builtin"), m).status();
  EXPECT_TRUE(Contains(s, "the built-in seeds-cnn")) << s.message();
}

// 64 synthetic 28x28x1 images of 10 classes.
const data::ImageDataset& SyntheticImages() {
  static const std::unique_ptr<data::ImageDataset> dataset =
      []() -> std::unique_ptr<data::ImageDataset> {
    constexpr int kCount = 64;
    std::vector<uint8_t> pixels(size_t{kCount} * 784);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 2654435761u);
    std::vector<int32_t> labels(kCount);
    for (int i = 0; i < kCount; ++i) labels[static_cast<size_t>(i)] = i % 10;
    auto made = data::InMemoryDataset::Create("synthetic", {28, 28, 1}, 10, std::move(pixels),
                                              std::move(labels));
    return std::move(*made);
  }();
  return *dataset;
}

// Parameters and moving statistics after `steps` steps of shards `ranges` (one backend each,
// each on its own pool of `threads`), their buffers summed as the ring sums two shards. The
// backends number their shards `renumber` past the ranges' (the same images, other masks).
ModelState TrainShards(const DeclaredModel& m, const std::vector<ShardRange>& ranges, int threads,
                       int steps, int renumber = 0) {
  const data::ImageDataset* dataset = &SyntheticImages();
  constexpr int kBatch = 4;
  std::vector<std::unique_ptr<nn::ThreadPool>> pools;
  std::vector<std::unique_ptr<StepBackend>> backends;
  const ModelState initial{model::InitialParameters(m.graph, 5),
                           std::vector<float>(m.graph.parameter_count, 0.0f),
                           std::vector<float>(m.graph.parameter_count, 0.0f),
                           0,
                           model::InitialState(m.graph),
                           {}};
  const std::vector<uint32_t> order = data::EpochOrder(5, 1, dataset->size());
  for (const ShardRange& r : ranges) {
    pools.push_back(std::make_unique<nn::ThreadPool>(threads));
    ShardRange numbered = r;
    numbered.first += renumber;
    // Decoding threads as many as the step's: the batches are the same bytes at any count.
    const DeclaredInput input{.dataset = dataset,
                              .prefetch = {.seed = 5,
                                           .augment = {.pad = 2, .flip = true},
                                           .normalization = {},
                                           .threads = threads - 1},
                              .prefetch_batches = 2,
                              .steps_per_epoch = steps};
    backends.push_back(MakeDeclaredCpuBackend(m, input, kBatch, pools.back().get(),
                                              nn::cpu::BestKernels(), numbered, 5));
    EXPECT_TRUE(backends.back()->SetState(initial).ok());
    EXPECT_TRUE(
        backends.back()->BeginEpoch(1, order, int64_t{r.first} * kBatch, 2 * kBatch, 1e-3).ok());
  }
  for (int step = 0; step < steps; ++step) {
    for (auto& b : backends) EXPECT_TRUE(b->ComputeGradients(1.0f / (2 * kBatch)).ok());
    const size_t n = backends[0]->reduce_floats();
    std::vector<float> sum(n);
    if (backends.size() == 1) {
      for (size_t i = 0; i < n; ++i)
        sum[i] = backends[0]->shard_buffer(0)[i] + backends[0]->shard_buffer(1)[i];
    } else {
      for (size_t i = 0; i < n; ++i)
        sum[i] = backends[0]->reduce_buffer()[i] + backends[1]->reduce_buffer()[i];
    }
    for (auto& b : backends) {
      std::copy(sum.begin(), sum.end(), b->reduce_buffer());
      EXPECT_TRUE(b->ApplyUpdate().ok());
    }
  }
  auto state = backends[0]->GetState();
  EXPECT_TRUE(state.ok());
  return *state;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DeclaredBackend, TwoShardsOnOneReplicaAreBitwiseTwoReplicasOfOneShard) {
  const DeclaredModel m = Example("bn_dropout_cnn");
  const ModelState one = TrainShards(m, {{.first = 0, .count = 2, .total = 2}}, 1, 3);
  const ModelState two = TrainShards(
      m, {{.first = 0, .count = 1, .total = 2}, {.first = 1, .count = 1, .total = 2}}, 3, 3);
  ASSERT_EQ(one.model_state.size(), 32u);
  EXPECT_TRUE(SameBits(one.params, two.params));
  EXPECT_TRUE(SameBits(one.model_state, two.model_state));
  EXPECT_TRUE(SameBits(one.adam_v, two.adam_v));
  EXPECT_EQ(one.iterations, 3);
  // The statistics moved from their initial values (means 0, variances 1).
  EXPECT_NE(one.model_state[0], 0.0f);
  EXPECT_NE(one.model_state[16], 1.0f);
  // The same images as shards 2 and 3 draw other Dropout masks: the shard's number decides.
  const ModelState shifted =
      TrainShards(m, {{.first = 0, .count = 2, .total = 2}}, 1, 3, /*renumber=*/2);
  EXPECT_FALSE(SameBits(one.params, shifted.params));
}

// SGD with Nesterov momentum, weight decay, a cosine schedule and label smoothing.
DeclaredTraining SgdRecipe(int64_t total_steps) {
  DeclaredTraining t{.recipe = {}, .total_steps = total_steps};
  t.recipe.optimizer = OptimizerKind::kSgd;
  t.recipe.momentum = 0.9;
  t.recipe.nesterov = true;
  t.recipe.weight_decay = 1e-3;
  t.recipe.lr_schedule = "cosine:0.05,warmup=2,alpha=0.1";
  t.recipe.label_smoothing = 0.1;
  return t;
}

// One replica of one shard of `m` trained by `training` from `start` (epoch 1's steps
// [first_step, last_step) of batches of 4) on one thread: its state after them.
ModelState TrainSteps(const DeclaredModel& m, const DeclaredTraining& training,
                      const ModelState& start, int first_step, int last_step) {
  constexpr int kBatch = 4;
  nn::ThreadPool pool(1);
  DeclaredInput input;
  input.dataset = &SyntheticImages();
  input.prefetch.seed = 5;
  input.steps_per_epoch = last_step;
  auto backend = MakeDeclaredCpuBackend(m, input, kBatch, &pool, nn::cpu::BestKernels(),
                                        {.first = 0, .count = 1, .total = 1}, 5, training);
  EXPECT_TRUE(backend->SetState(start).ok());
  const std::vector<uint32_t> order = data::EpochOrder(5, 1, SyntheticImages().size());
  EXPECT_TRUE(backend->BeginEpoch(1, order, int64_t{first_step} * kBatch, kBatch, 1e-3).ok());
  for (int step = first_step; step < last_step; ++step) {
    EXPECT_TRUE(backend->ComputeGradients(1.0f / kBatch).ok());
    EXPECT_TRUE(backend->ApplyUpdate().ok());
  }
  auto state = backend->GetState();
  EXPECT_TRUE(state.ok());
  return state.ok() ? *state : ModelState{};
}

// An SGD run stopped after any step and resumed from its state (momentum, iterations, moving
// statistics) ends with the bits of an uninterrupted one; its state holds no Adam moments.
TEST(DeclaredBackend, AnSgdRunResumedFromItsStateIsBitwiseAnUninterruptedOne) {
  const DeclaredModel m = Example("bn_dropout_cnn");
  const DeclaredTraining sgd = SgdRecipe(6);
  const size_t count = m.graph.parameter_count;
  ModelState initial{.params = model::InitialParameters(m.graph, 5),
                     .adam_m = {},
                     .adam_v = {},
                     .iterations = 0,
                     .model_state = model::InitialState(m.graph),
                     .sgd_momentum = std::vector<float>(count, 0.0f)};
  const ModelState whole = TrainSteps(m, sgd, initial, 0, 6);
  EXPECT_EQ(whole.iterations, 6);
  EXPECT_TRUE(whole.adam_m.empty());
  ASSERT_EQ(whole.sgd_momentum.size(), count);
  for (int stop : {1, 3, 5}) {
    SCOPED_TRACE(stop);
    const ModelState part = TrainSteps(m, sgd, initial, 0, stop);
    const ModelState resumed = TrainSteps(m, sgd, part, stop, 6);
    EXPECT_TRUE(SameBits(resumed.params, whole.params));
    EXPECT_TRUE(SameBits(resumed.sgd_momentum, whole.sgd_momentum));
    EXPECT_TRUE(SameBits(resumed.model_state, whole.model_state));
  }
  // Another recipe trains other bits; Adam's state does not fit an SGD backend.
  DeclaredTraining plain = sgd;
  plain.recipe.nesterov = false;
  EXPECT_FALSE(SameBits(TrainSteps(m, plain, initial, 0, 6).params, whole.params));
  ModelState adam = initial;
  adam.sgd_momentum.clear();
  adam.adam_m.assign(count, 0.0f);
  adam.adam_v.assign(count, 0.0f);
  nn::ThreadPool pool(1);
  DeclaredInput input;
  input.dataset = &SyntheticImages();
  auto backend = MakeDeclaredCpuBackend(m, input, 4, &pool, nn::cpu::BestKernels(), {}, 5, sgd);
  const Status refused = backend->SetState(adam);
  EXPECT_TRUE(Contains(refused, "sgd's state")) << refused.message();
}

// Weight decay is Keras 3's: before the update, w -= w x wd x lr at the step's rate; plain
// SGD keeps no state.
TEST(DeclaredBackend, WeightDecayShrinksTheWeightsBeforeThePlainSgdUpdate) {
  const DeclaredModel m = Example("bn_dropout_cnn");
  DeclaredTraining plain{.recipe = {}, .total_steps = 1};
  plain.recipe.optimizer = OptimizerKind::kSgd;
  plain.recipe.lr_schedule = "constant:0.1";
  DeclaredTraining decayed = plain;
  decayed.recipe.weight_decay = 0.5;
  const ModelState initial{.params = model::InitialParameters(m.graph, 5),
                           .adam_m = {},
                           .adam_v = {},
                           .iterations = 0,
                           .model_state = model::InitialState(m.graph),
                           .sgd_momentum = {}};
  const ModelState a = TrainSteps(m, plain, initial, 0, 1);
  const ModelState b = TrainSteps(m, decayed, initial, 0, 1);
  EXPECT_TRUE(a.sgd_momentum.empty());
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    // a = w - lr g; b = w (1 - wd lr) - lr g = a - w wd lr
    const float w = initial.params[i];
    EXPECT_NEAR(b.params[i], a.params[i] - w * 0.05f, 1e-6f + std::abs(w) * 1e-5f) << i;
  }
}

}  // namespace
}  // namespace tj::train
