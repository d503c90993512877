// Declared models (--model-config, TJ_MODEL_CONFIG) with the real binary on Fashion-MNIST: the
// seeds' CNN declared in Keras JSON trains bitwise as the built-in model; a model with
// BatchNormalization and Dropout trains on two workers, is stopped by SIGTERM and resumes to
// the bits of an uninterrupted run (weights, moving statistics, epoch figures), and the
// evaluator evaluates its checkpoints; a model that does not fit the dataset is refused,
// naming both shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/integration/trainer/trainer_harness.h"
#include "trainer/checkpoint/state_file.h"
#include "trainer/nn/model.h"

namespace tj::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string ExampleModel(const std::string& name) {
  return std::string(TJ_SOURCE_DIR) + "/examples/models/" + name + ".json";
}

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The epoch figures that do not depend on timing.
std::vector<nlohmann::json> EpochFigures(const Subprocess& p) {
  std::vector<nlohmann::json> out;
  for (const auto& e : Events(p, "epoch_end")) {
    out.push_back({{"epoch", e["epoch"]}, {"loss", e["loss"]}, {"accuracy", e["accuracy"]}});
  }
  return out;
}

nlohmann::json TrainEnd(const Subprocess& p) {
  auto ends = Events(p, "train_end");
  return ends.empty() ? nlohmann::json::object() : ends.back();
}

// The tensors of a state file, or a failure naming it.
checkpoint::TrainingState ReadState(const std::string& path, const std::string& key) {
  auto state = checkpoint::ReadStateFile(path, key);
  EXPECT_TRUE(state.ok()) << path << ": " << state.status().message();
  return state.ok() ? *state : checkpoint::TrainingState{};
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The declared seeds' CNN's weights (Keras' layout: dense kernels (in, out)) in the built-in
// layout (trainer/nn/model.h: dense kernels (out, in)).
std::vector<float> InBuiltInLayout(const std::vector<float>& keras) {
  using nn::Layout;
  std::vector<float> out(keras);
  auto transpose = [&](size_t at, size_t in, size_t units) {
    for (size_t i = 0; i < in; ++i) {
      for (size_t o = 0; o < units; ++o) out[at + o * in + i] = keras[at + i * units + o];
    }
  };
  transpose(Layout::kDense1Kernel, nn::kFlat, nn::kHidden);
  transpose(Layout::kDense2Kernel, nn::kHidden, nn::kClasses);
  return out;
}

// (1) The seeds' CNN from examples/models/seeds_cnn.json runs as the built-in model's fused
// kernels: the same losses, accuracies and test figures, and the same weights to the bit
// (in the built-in layout), at 1 and 2 threads; --evaluate-only reads its export back.
TEST(DeclaredModelTest, TheSeedsCnnFromItsJsonTrainsBitwiseAsTheBuiltInModel) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  const std::vector<std::string> flags = {"--epochs", "2", "--steps-per-epoch", "15"};
  const std::vector<std::string> declared = {"--model-config", ExampleModel("seeds_cnn")};
  auto builtin =
      StartTrainer(With(flags, {"--threads", "1", "--export-dir", dir / "builtin"}), "", dir / "a");
  ASSERT_EQ(builtin->Wait(120s), 0) << builtin->Stderr();
  auto one = StartTrainer(
      With(With(flags, declared), {"--threads", "1", "--export-dir", dir / "declared"}), "",
      dir / "b");
  ASSERT_EQ(one->Wait(120s), 0) << one->Stderr();
  auto two = StartTrainer(With(With(flags, declared), {"--threads", "2"}), "", dir / "c");
  ASSERT_EQ(two->Wait(120s), 0) << two->Stderr();

  const auto model = Events(*one, "model");
  ASSERT_EQ(model.size(), 1u) << one->Stdout();
  EXPECT_EQ(model[0]["parameters"], nn::Layout::kCount);
  EXPECT_EQ(model[0]["state"], 0);
  ASSERT_EQ(EpochFigures(*builtin).size(), 2u);
  EXPECT_EQ(EpochFigures(*one), EpochFigures(*builtin));
  for (const char* key : {"test_loss", "test_accuracy"}) {
    EXPECT_EQ(TrainEnd(*one)[key], TrainEnd(*builtin)[key]) << key;
  }
  // The declared model's weights are in Keras' layout: their digest is not the built-in's.
  EXPECT_EQ(Digest(*two), Digest(*one));
  const std::vector<float> builtin_weights =
      *ReadState(dir / "builtin/weights.tjckpt", "").FindTensor("weights");
  const checkpoint::TrainingState exported = ReadState(dir / "declared/weights.tjckpt", "");
  ASSERT_NE(exported.FindTensor("weights"), nullptr);
  EXPECT_TRUE(SameBits(InBuiltInLayout(*exported.FindTensor("weights")), builtin_weights));
  EXPECT_EQ(exported.FindTensor("model_state"), nullptr);  // no BatchNormalization
  EXPECT_TRUE(fs::exists(dir / "declared/model.json"));

  Subprocess e({kTrainer, "--data-dir", kDataDir, "--evaluate-only", "--model", dir / "declared",
                "--model-config", dir / "declared/model.json"},
               {}, dir / "eval");
  ASSERT_EQ(e.Wait(60s), 0) << e.Stderr();
  auto ev = Events(e, "evaluation").at(0);
  EXPECT_EQ(ev["weights_sha256"], Digest(*one));
  EXPECT_EQ(ev["loss"], TrainEnd(*one)["test_loss"]);
  // Without --model-config the export is refused, saying how to evaluate it.
  Subprocess plain(
      {kTrainer, "--data-dir", kDataDir, "--evaluate-only", "--model", dir / "declared"}, {},
      dir / "plain");
  ASSERT_EQ(plain.Wait(60s), 1);
  EXPECT_NE(plain.Stderr().find("the declared model 'seeds'"), std::string::npos) << plain.Stderr();
  EXPECT_NE(plain.Stderr().find("evaluate it with --model-config " + (dir / "declared/model.json")),
            std::string::npos)
      << plain.Stderr();
}

// A job of `workers` processes (one without TF_CONFIG when `workers` is 1), started now;
// `failpoints` (TJ_FAILPOINTS) go to the last worker only.
std::vector<std::unique_ptr<Subprocess>> StartJob(int workers,
                                                  const std::vector<std::string>& flags,
                                                  const TempDir& dir, const std::string& log,
                                                  const std::string& failpoints = "") {
  std::vector<std::unique_ptr<Subprocess>> job;
  LoopbackTfCluster c = LoopbackTfCluster::Make(workers);
  for (int i = 0; i < workers; ++i) {
    const std::string tf_config = workers == 1 ? "" : c.TfConfig("worker", i);
    std::map<std::string, std::string> env;
    if (i == workers - 1 && !failpoints.empty()) env["TJ_FAILPOINTS"] = failpoints;
    job.push_back(StartTrainer(flags, tf_config, dir / (log + std::to_string(i)), kTestKey, env));
  }
  return job;
}

// `p` succeeds with a weights digest and `epochs` epochs' figures.
void ExpectTrained(Subprocess& p, size_t epochs) {
  ASSERT_EQ(p.Wait(120s), 0) << p.Stderr();
  ASSERT_EQ(Digest(p).size(), 64u);
  ASSERT_EQ(EpochFigures(p).size(), epochs);
}

// `p` succeeds with `reference`'s weights, epoch figures and test figures, to the bit.
void ExpectTrainedAs(Subprocess& p, const Subprocess& reference) {
  ASSERT_EQ(p.Wait(120s), 0) << p.Stderr();
  EXPECT_EQ(Digest(p), Digest(reference));
  EXPECT_EQ(EpochFigures(p), EpochFigures(reference));
  for (const char* key : {"test_loss", "test_accuracy"}) {
    EXPECT_EQ(TrainEnd(p)[key], TrainEnd(reference)[key]) << key;
  }
}

// Sends SIGTERM to `worker` once it reports its failpoint train.step (it pauses there).
void SignalAtFailpoint(Subprocess& worker) {
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (worker.Stderr().find("failpoint train.step") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << worker.Stderr();
    ASSERT_TRUE(worker.running()) << worker.Stderr();
    std::this_thread::sleep_for(20ms);
  }
  worker.Signal(SIGTERM);
}

// The newest backup-<seq> in `dir`.
std::string NewestBackup(const std::string& dir) {
  std::string newest;
  int64_t seq = -1;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename();
    if (name.rfind("backup-", 0) != 0) continue;
    const int64_t n = std::stoll(name.substr(7));
    if (n > seq) {
      seq = n;
      newest = entry.path();
    }
  }
  return newest;
}

// (2) BatchNormalization and Dropout in elastic mode (2 shards): one worker uninterrupted; then
// two workers, stopped by SIGTERM after step 3 of epoch 1 (the chief backs that step up), and
// resumed at two workers. The resumed run ends with the uninterrupted one's
// weights, test figures (which read the moving statistics) and epoch figures: the Dropout
// masks follow the shard, not the worker, and the moving statistics are in the backup. The
// evaluator, given the same --model-config, evaluates the final checkpoint as the trainer did.
TEST(DeclaredModelTest, ABatchNormDropoutModelResumesBitwiseOnTwoWorkersAfterSigterm) {
  TJ_REQUIRE_DATASET();
  TempDir reference_dir, dir;
  auto flags = [](const TempDir& d) {
    return std::vector<std::string>{
        "--epochs",         "2",          "--steps-per-epoch", "6",
        "--threads",        "1",          "--elastic-shards",  "2",
        "--backup-dir",     d / "backup", "--save-freq",       "4",
        "--checkpoint-dir", d / "ckpt",   "--model-config",    ExampleModel("bn_dropout_cnn")};
  };
  auto reference = StartJob(1, flags(reference_dir), reference_dir, "ref");
  ASSERT_NO_FATAL_FAILURE(ExpectTrained(*reference[0], 2));
  const auto model = Events(*reference[0], "model");
  ASSERT_EQ(model.size(), 1u);
  EXPECT_EQ(model[0]["state"], 32);  // BatchNormalization(16): moving mean and variance

  // Worker 1 pauses in its 3rd step and is sent SIGTERM there: both stop after step 3.
  auto first = StartJob(2, flags(dir), dir, "first", "train.step=sleep:1500@3");
  ASSERT_NO_FATAL_FAILURE(SignalAtFailpoint(*first[1]));
  for (auto& p : first) {
    ASSERT_EQ(p->Wait(60s), 75) << p->Stderr();
    auto stopped = Events(*p, "stopped");
    ASSERT_EQ(stopped.size(), 1u) << p->Stdout();
    EXPECT_EQ(stopped[0]["step"], 3);
  }
  // The backup holds the moving statistics, moved from their initial values (0 and 1).
  const checkpoint::TrainingState backup = ReadState(NewestBackup(dir / "backup"), kTestKey);
  EXPECT_EQ(backup.step, 3);
  const std::vector<float>* moving = backup.FindTensor("model_state");
  ASSERT_NE(moving, nullptr);
  ASSERT_EQ(moving->size(), 32u);
  EXPECT_NE((*moving)[0], 0.0f);
  EXPECT_NE((*moving)[16], 1.0f);

  auto second = StartJob(2, flags(dir), dir, "second");
  for (auto& p : second) {
    ASSERT_NO_FATAL_FAILURE(ExpectTrainedAs(*p, *reference[0]));
    auto restored = Events(*p, "restored");
    ASSERT_EQ(restored.size(), 1u);
    EXPECT_EQ(restored[0]["step"], 3);
  }
  // The checkpoints carry the moving statistics too, for the evaluator: the uninterrupted
  // run's bits (the test figures above hardly move yet after 12 updates at momentum 0.99).
  const checkpoint::TrainingState ckpt = ReadState(dir / "ckpt/ckpt-2", kTestKey);
  const checkpoint::TrainingState reference_ckpt =
      ReadState(reference_dir / "ckpt/ckpt-2", kTestKey);
  ASSERT_NE(ckpt.FindTensor("model_state"), nullptr);
  ASSERT_NE(reference_ckpt.FindTensor("model_state"), nullptr);
  EXPECT_TRUE(SameBits(*ckpt.FindTensor("model_state"), *reference_ckpt.FindTensor("model_state")));
  EXPECT_EQ(ckpt.FindTensor("adam_m"), nullptr);
  auto evaluator = StartTrainer(With(flags(dir), {"--role", "evaluator"}), "", dir / "eval");
  ASSERT_EQ(evaluator->Wait(60s), 0) << evaluator->Stderr();
  auto evals = Events(*evaluator, "evaluation");
  ASSERT_FALSE(evals.empty()) << evaluator->Stdout();
  EXPECT_EQ(evals.back()["checkpoint"], "ckpt-2");
  EXPECT_EQ(evals.back()["loss"], TrainEnd(*reference[0])["test_loss"]);
  // An evaluator of the built-in model refuses the declared model's checkpoints.
  auto builtin = StartTrainer({"--role", "evaluator", "--checkpoint-dir", dir / "ckpt"}, "",
                              dir / "builtin_eval");
  ASSERT_EQ(builtin->Wait(60s), 1) << builtin->Stderr();
  EXPECT_NE(builtin->Stderr().find("the declared model 'bn_dropout_cnn'"), std::string::npos)
      << builtin->Stderr();
}

std::string WriteModel(const TempDir& dir, const std::string& name, const nlohmann::json& model) {
  std::string path = dir / name;
  std::ofstream(path) << model.dump(1);
  return path;
}

nlohmann::json SequentialModel(const std::vector<int>& input_shape, int units) {
  nlohmann::json batch_shape = {nullptr};
  for (int d : input_shape) batch_shape.push_back(d);
  auto layer = [](const std::string& cls, nlohmann::json config) {
    return nlohmann::json{{"class_name", cls}, {"config", std::move(config)}};
  };
  return {{"class_name", "Sequential"},
          {"config",
           {{"name", "other"},
            {"layers",
             {layer("InputLayer", {{"name", "input"}, {"batch_shape", batch_shape}}),
              layer("Flatten", {{"name", "flatten"}}),
              layer("Dense", {{"name", "dense"}, {"units", units}})}}}}};
}

// (3) What does not fit is refused before anything trains (exit 2), naming both shapes and
// what to change; so are --device gpu and a model the engine does not support. A backup of
// another model is refused naming the model's digest.
TEST(DeclaredModelTest, AModelThatDoesNotFitTheDatasetIsRefusedNamingBothShapes) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  const std::string rgb = WriteModel(dir, "rgb.json", SequentialModel({32, 32, 3}, 10));
  const std::string twelve = WriteModel(dir, "twelve.json", SequentialModel({28, 28, 1}, 12));
  nlohmann::json lstm = SequentialModel({28, 28, 1}, 10);
  lstm["config"]["layers"][1] = {{"class_name", "LSTM"}, {"config", {{"name", "lstm"}}}};
  const std::string unsupported = WriteModel(dir, "lstm.json", lstm);
  struct Refusal {
    std::vector<std::string> flags;
    std::map<std::string, std::string> env;
    std::vector<std::string> messages;
  };
  const std::vector<Refusal> refusals = {
      {{"--model-config", rgb},
       {},
       {"--model-config " + rgb +
            ": the model's input is (32, 32, 3) and the dataset's images "
            "are (28, 28, 1)",
        "declare the model's input as keras.Input(shape=(28, 28, 1))"}},
      {{},  // the environment's way
       {{"TJ_MODEL_CONFIG", twelve}},
       {"the model's output is (12,) and the dataset has 10 classes",
        "end the model with Dense(10)"}},
      {{"--model-config", unsupported},
       {},
       {"layer LSTM 'lstm': not supported; the supported layers are"}},
      {{"--model-config", ExampleModel("seeds_cnn"), "--device", "gpu"},
       {},
       {"declared models (--model-config", "train on the CPU for now; use --device cpu"}},
  };
  int i = 0;
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(i);
    auto p = StartTrainer(With({"--epochs", "1", "--steps-per-epoch", "1"}, r.flags), "",
                          dir / ("refused" + std::to_string(i++)), kTestKey, r.env);
    ASSERT_EQ(p->Wait(60s), 2) << p->Stderr();
    for (const std::string& m : r.messages) {
      EXPECT_NE(p->Stderr().find(m), std::string::npos) << "expected \"" << m << "\" in\n"
                                                        << p->Stderr();
    }
    EXPECT_TRUE(Events(*p, "first_step").empty());
  }

  // A backup of the built-in model does not resume as a declared one, even of the same layers.
  const std::vector<std::string> backed_up = {
      "--epochs",    "1", "--steps-per-epoch", "2",
      "--threads",   "1", "--backup-dir",      dir / "backup",
      "--save-freq", "1", "--keep-backup"};
  auto builtin = StartTrainer(backed_up, "", dir / "builtin");
  ASSERT_EQ(builtin->Wait(60s), 0) << builtin->Stderr();
  auto declared = StartTrainer(With(backed_up, {"--model-config", ExampleModel("seeds_cnn")}), "",
                               dir / "declared");
  ASSERT_EQ(declared->Wait(60s), 1) << declared->Stderr();
  EXPECT_NE(declared->Stderr().find("was written by a run with another configuration"),
            std::string::npos)
      << declared->Stderr();
  EXPECT_NE(declared->Stderr().find("model_sha256"), std::string::npos) << declared->Stderr();
}

// (4) A recipe of its own: SGD with Nesterov momentum, weight decay, a cosine schedule and label
// smoothing, in elastic mode (2 shards). Two workers stopped by SIGTERM after step 3 resume to
// the bits of one uninterrupted worker (the momentum rides in the backup as sgd_momentum, the
// schedule's step in the optimizer's iterations); the epochs report the schedule's rate; a
// resume with another --momentum is refused naming the field.
TEST(DeclaredModelTest, AnSgdCosineRecipeResumesBitwiseAndAnotherMomentumIsRefused) {
  TJ_REQUIRE_DATASET();
  TempDir reference_dir, dir;
  const std::vector<std::string> recipe = {"--optimizer",
                                           "sgd",
                                           "--momentum",
                                           "0.9",
                                           "--nesterov",
                                           "--weight-decay",
                                           "1e-4",
                                           "--lr-schedule",
                                           "cosine:0.05,alpha=0.1",
                                           "--label-smoothing",
                                           "0.1"};
  auto flags = [&](const TempDir& d) {
    return With({"--epochs", "2", "--steps-per-epoch", "6", "--threads", "1", "--elastic-shards",
                 "2", "--backup-dir", d / "backup", "--save-freq", "4", "--checkpoint-dir",
                 d / "ckpt", "--model-config", ExampleModel("bn_dropout_cnn")},
                recipe);
  };
  auto reference = StartJob(1, flags(reference_dir), reference_dir, "ref");
  ASSERT_NO_FATAL_FAILURE(ExpectTrained(*reference[0], 2));
  // The rate of each epoch's first step: 0.05 at step 0; at step 6 of 12, half way down the
  // cosine to alpha x 0.05: 0.05 x (0.9 x 0.5 + 0.1).
  const auto epochs = Events(*reference[0], "epoch_end");
  EXPECT_DOUBLE_EQ(epochs.at(0)["lr"].get<double>(), 0.05);
  EXPECT_NEAR(epochs.at(1)["lr"].get<double>(), 0.0275, 1e-12);

  auto first = StartJob(2, flags(dir), dir, "first", "train.step=sleep:1500@3");
  ASSERT_NO_FATAL_FAILURE(SignalAtFailpoint(*first[1]));
  for (auto& p : first) ASSERT_EQ(p->Wait(60s), 75) << p->Stderr();
  const checkpoint::TrainingState backup = ReadState(NewestBackup(dir / "backup"), kTestKey);
  EXPECT_EQ(backup.step, 3);
  ASSERT_NE(backup.FindTensor("sgd_momentum"), nullptr);
  EXPECT_EQ(backup.FindTensor("adam_m"), nullptr);
  EXPECT_EQ(backup.fingerprint.value("optimizer", ""), "sgd");

  // Another momentum: refused by the chief, naming the field (one worker: elastic mode
  // resumes at any worker count, so only the recipe differs).
  std::vector<std::string> other = flags(dir);
  *std::find(other.begin(), other.end(), "0.9") = "0.8";
  auto refused = StartJob(1, other, dir, "refused");
  ASSERT_EQ(refused[0]->Wait(60s), 1) << refused[0]->Stderr();
  EXPECT_NE(refused[0]->Stderr().find("another configuration"), std::string::npos)
      << refused[0]->Stderr();
  EXPECT_NE(refused[0]->Stderr().find("momentum"), std::string::npos) << refused[0]->Stderr();

  auto second = StartJob(2, flags(dir), dir, "second");
  for (auto& p : second) {
    ASSERT_NO_FATAL_FAILURE(ExpectTrainedAs(*p, *reference[0]));
    ASSERT_EQ(Events(*p, "restored").size(), 1u);
  }
  // Checkpoints are for evaluation: no optimizer state.
  const checkpoint::TrainingState ckpt = ReadState(dir / "ckpt/ckpt-2", kTestKey);
  EXPECT_NE(ckpt.FindTensor("weights"), nullptr);
  EXPECT_EQ(ckpt.FindTensor("sgd_momentum"), nullptr);

  // The built-in model takes the defaults only.
  auto builtin = StartTrainer({"--epochs", "1", "--steps-per-epoch", "1", "--momentum", "0.9"}, "",
                              dir / "builtin");
  ASSERT_EQ(builtin->Wait(60s), 2) << builtin->Stderr();
  EXPECT_NE(builtin->Stderr().find("--momentum applies to declared models only"), std::string::npos)
      << builtin->Stderr();
}

}  // namespace
}  // namespace tj::testing
