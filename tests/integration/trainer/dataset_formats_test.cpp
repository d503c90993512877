// Declared models on the dataset flags (--dataset-format, --train-data, --eval-data, ...) with
// the real binary, on small datasets this test writes: the same 32x32x3 PNG images as class
// folders, as a TFRecord file and as an .npz train to the same bits (augmented, normalised, at
// any decoding thread count); labels wider than a byte; two workers resume bitwise after one
// is killed mid-epoch; and every refusal names the flag or the shapes and what to do.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/integration/trainer/trainer_harness.h"
#include "tests/unit/trainer/data/dataset_files.h"
#include "trainer/data/image_encoder.h"
#include "trainer/data/tf_example.h"
#include "trainer/data/tfrecord_reader.h"

namespace tj::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using data::testing::AsString;
using data::testing::NpyBytes;
using data::testing::PatternImage;
using data::testing::ZipBytes;

constexpr data::ImageShape kShape{32, 32, 3};
constexpr int kClasses = 4;

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// `per_class` PNG images of each of kClasses classes, written as <root>/<split>/c<k>/<i>.png,
// as <root>/<split>.tfrecord and into the <split> arrays of <root>/data.npz, all in the
// folders' order (class by class, files by name), labels as int64 (times `label_step` in
// <root>/wide.npz).
struct Split {
  std::string images;  // x_<split>, uint8 N x 32 x 32 x 3
  std::string labels;  // y_<split>, int64
  std::string wide;    // y_<split> x 100: labels beyond a byte
  int count = 0;
};

Split WriteSplit(const fs::path& root, const std::string& split, int per_class, int seed) {
  Split out;
  std::string records;
  for (int k = 0; k < kClasses; ++k) {
    for (int i = 0; i < per_class; ++i) {
      const std::vector<uint8_t> pixels = PatternImage(kShape, seed + k * 100 + i);
      auto png = data::EncodePng(pixels, kShape);
      EXPECT_TRUE(png.ok());
      const std::string name = "c" + std::to_string(k) + "/" + std::to_string(10 + i) + ".png";
      WriteFile(root / split / name, *png);
      const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(png->data()),
                                           png->size());
      const std::string example =
          data::SerializeImageExample(bytes, k, "image/encoded", "image/class/label");
      records += data::FrameTfRecord(std::span<const uint8_t>(
          reinterpret_cast<const uint8_t*>(example.data()), example.size()));
      out.images += AsString(pixels);
      for (const int64_t label : {int64_t{k}}) {
        out.labels.append(reinterpret_cast<const char*>(&label), 8);
        const int64_t wide = label * 100;
        out.wide.append(reinterpret_cast<const char*>(&wide), 8);
      }
      ++out.count;
    }
  }
  WriteFile(root / (split + ".tfrecord"), records);
  return out;
}

struct Datasets {
  fs::path root;
  std::string Folder(const std::string& split) const { return root / split; }
  std::string TfRecord(const std::string& split) const { return root / (split + ".tfrecord"); }
  std::string Npz() const { return root / "data.npz"; }
  std::string WideNpz() const { return root / "wide.npz"; }
};

Datasets WriteDatasets(const fs::path& root) {
  const Split train = WriteSplit(root, "train", 12, 1);
  const Split test = WriteSplit(root, "test", 4, 7);
  auto arrays = [&](bool wide) {
    const auto n = [](const Split& s) { return static_cast<uint64_t>(s.count); };
    return std::vector<std::pair<std::string, std::string>>{
        {"x_train.npy", NpyBytes("|u1", {n(train), 32, 32, 3}, train.images)},
        {"y_train.npy", NpyBytes("<i8", {n(train)}, wide ? train.wide : train.labels)},
        {"x_test.npy", NpyBytes("|u1", {n(test), 32, 32, 3}, test.images)},
        {"y_test.npy", NpyBytes("<i8", {n(test)}, wide ? test.wide : test.labels)}};
  };
  WriteFile(root / "data.npz", ZipBytes(arrays(false), false));
  WriteFile(root / "wide.npz", ZipBytes(arrays(true), false));
  return {root};
}

// examples/models/bn_dropout_cnn.json (Conv2D, BatchNormalization, ReLU, MaxPooling2D,
// Dropout, Dense) taking `input` images and predicting `classes`.
std::string WriteModel(const std::string& path, const std::vector<int>& input, int classes) {
  std::ifstream in(std::string(TJ_SOURCE_DIR) + "/examples/models/bn_dropout_cnn.json");
  nlohmann::json m = nlohmann::json::parse(in);
  nlohmann::json& layers = m["config"]["layers"];
  nlohmann::json shape = {nullptr};
  for (int d : input) shape.push_back(d);
  layers.front()["config"]["batch_shape"] = shape;
  layers.back()["config"]["units"] = classes;
  std::ofstream(path) << m.dump();
  return path;
}

std::vector<std::string> Augmented(const std::string& pad = "2") {
  return {"--augment-crop-pad", pad,           "--augment-flip",
          "--normalize-mean",   "0.5,0.4,0.3", "--normalize-std",
          "0.25,0.25,0.2"};
}

nlohmann::json TrainEnd(const Subprocess& p) {
  auto ends = Events(p, "train_end");
  return ends.empty() ? nlohmann::json::object() : ends.back();
}

// (1) One set of images in three formats: the same batches, so the same weights to the bit,
// whichever format and however many decoding threads; the dataset line names the shape and
// classes; an exported model evaluates as the run's test figures; int64 labels up to 300.
TEST(DatasetFormatsTest, FolderTfRecordAndNpzOfTheSameImagesTrainToTheSameBits) {
  TempDir dir;
  const Datasets d = WriteDatasets(dir / "data");
  const std::string model = WriteModel(dir / "rgb.json", {32, 32, 3}, kClasses);
  const std::vector<std::string> common =
      With({"--model-config", model, "--epochs", "2", "--batch-size", "8", "--threads", "1"},
           Augmented());
  const std::vector<std::string> folder = {"--dataset-format", "folder",      "--train-data",
                                           d.Folder("train"),  "--eval-data", d.Folder("test")};
  auto a = StartTrainer(
      With(With(common, folder), {"--data-threads", "0", "--export-dir", dir / "export"}), "",
      dir / "folder");
  auto b = StartTrainer(With(common, {"--dataset-format", "tfrecord", "--train-data",
                                      d.TfRecord("train"), "--eval-data", d.TfRecord("test"),
                                      "--data-threads", "3", "--prefetch-batches", "4"}),
                        "", dir / "tfrecord");
  auto c = StartTrainer(With(common, {"--dataset-format", "npz", "--train-data", d.Npz()}), "",
                        dir / "npz");
  for (auto* p : {a.get(), b.get(), c.get()}) ASSERT_EQ(p->Wait(120s), 0) << p->Stderr();

  const auto dataset = Events(*a, "dataset");
  ASSERT_EQ(dataset.size(), 1u) << a->Stdout();
  EXPECT_EQ(dataset[0]["image_shape"], nlohmann::json({32, 32, 3}));
  EXPECT_EQ(dataset[0]["classes"], kClasses);
  EXPECT_EQ(dataset[0]["train_examples"], 48);
  EXPECT_EQ(dataset[0]["eval_examples"], 16);
  ASSERT_EQ(Events(*a, "epoch_end").size(), 2u);
  EXPECT_EQ(Events(*a, "epoch_end")[0]["steps"], 6);
  const std::string digest = Digest(*a);
  ASSERT_EQ(digest.size(), 64u);
  EXPECT_EQ(Digest(*b), digest);
  EXPECT_EQ(Digest(*c), digest);
  for (const char* key : {"test_loss", "test_accuracy"}) {
    EXPECT_EQ(TrainEnd(*b)[key], TrainEnd(*a)[key]) << key;
    EXPECT_EQ(TrainEnd(*c)[key], TrainEnd(*a)[key]) << key;
  }

  auto evaluated = StartTrainer(
      With(With({"--evaluate-only", "--model", dir / "export", "--model-config", model}, folder),
           Augmented()),
      "", dir / "evaluate");
  ASSERT_EQ(evaluated->Wait(60s), 0) << evaluated->Stderr();
  ASSERT_EQ(Events(*evaluated, "evaluation").size(), 1u);
  EXPECT_EQ(Events(*evaluated, "evaluation")[0]["loss"], TrainEnd(*a)["test_loss"]);

  // Labels 0, 100, 200, 300: 301 classes, inferred from the largest label.
  const std::string wide = WriteModel(dir / "wide.json", {32, 32, 3}, 301);
  auto w = StartTrainer({"--model-config", wide, "--epochs", "1", "--batch-size", "8", "--threads",
                         "1", "--dataset-format", "npz", "--train-data", d.WideNpz()},
                        "", dir / "wide");
  ASSERT_EQ(w->Wait(60s), 0) << w->Stderr();
  EXPECT_EQ(Events(*w, "dataset").at(0)["classes"], 301);
  EXPECT_TRUE(TrainEnd(*w)["test_loss"].is_number()) << w->Stdout();
}

// (2) Two workers in elastic mode (2 shards) on image folders, augmented, three decoding
// threads each, backing up every 2 steps: worker 1 is killed (SIGKILL) in step 3 of epoch 2,
// worker 0 exits 75, and both started again end with the bits of one uninterrupted worker
// decoding on the step's own thread: the batches do not depend on the worker or thread count.
TEST(DatasetFormatsTest, TwoWorkersResumeBitwiseAfterAWorkerIsKilledMidEpoch) {
  TempDir dir;
  const Datasets d = WriteDatasets(dir / "data");
  const std::string model = WriteModel(dir / "rgb.json", {32, 32, 3}, kClasses);
  auto flags = [&](const std::string& tag, const std::string& threads) {
    return With({"--model-config",
                 model,
                 "--dataset-format",
                 "folder",
                 "--train-data",
                 d.Folder("train"),
                 "--eval-data",
                 d.Folder("test"),
                 "--epochs",
                 "2",
                 "--batch-size",
                 "4",
                 "--threads",
                 "1",
                 "--elastic-shards",
                 "2",
                 "--save-freq",
                 "2",
                 "--backup-dir",
                 dir / (tag + "backup"),
                 "--collective-timeout",
                 "10",
                 "--data-threads",
                 threads},
                Augmented());
  };
  auto reference = StartTrainer(flags("ref-", "0"), "", dir / "ref");
  ASSERT_EQ(reference->Wait(120s), 0) << reference->Stderr();
  const std::string expected = Digest(*reference);
  ASSERT_EQ(expected.size(), 64u);
  ASSERT_EQ(Events(*reference, "epoch_end").size(), 2u);
  EXPECT_EQ(Events(*reference, "epoch_end")[0]["steps"], 6);

  LoopbackTfCluster c = LoopbackTfCluster::Make(2);
  auto w0 = StartTrainer(flags("", "3"), c.TfConfig("worker", 0), dir / "w0");
  // Worker 1's 9th step is step 3 of epoch 2, after the backup of step 2.
  auto w1 = StartTrainer(flags("", "3"), c.TfConfig("worker", 1), dir / "w1", kTestKey,
                         {{"TJ_FAILPOINTS", "train.step=sleep:3000@9"}});
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (w1->Stderr().find("failpoint train.step") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << w1->Stderr();
    ASSERT_TRUE(w1->running()) << w1->Stderr();
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(w0->WaitForLine(R"("backup_saved","epoch":2,"step":2)", 60s)) << w0->Stdout();
  w1->Signal(SIGKILL);
  auto code = w0->Wait(30s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 75) << w0->Stderr();

  auto r0 = StartTrainer(flags("", "3"), c.TfConfig("worker", 0), dir / "r0");
  auto r1 = StartTrainer(flags("", "3"), c.TfConfig("worker", 1), dir / "r1");
  for (auto* p : {r0.get(), r1.get()}) {
    ASSERT_EQ(p->Wait(120s), 0) << p->Stderr();
    const auto restored = Events(*p, "restored");
    ASSERT_EQ(restored.size(), 1u) << p->Stdout();
    EXPECT_EQ(restored[0]["epoch"], 2);
    EXPECT_EQ(restored[0]["step"], 2);
    EXPECT_EQ(Digest(*p), expected);
    EXPECT_EQ(TrainEnd(*p)["test_loss"], TrainEnd(*reference)["test_loss"]);
  }
}

// (3) Refusals before anything trains: exit 2 naming the flag and value or both shapes; a
// backup of other data (or another augmentation) is refused naming what changed.
TEST(DatasetFormatsTest, WhatDoesNotFitIsRefusedNamingTheFlagOrTheShapes) {
  TempDir dir;
  const Datasets d = WriteDatasets(dir / "data");
  const std::string rgb = WriteModel(dir / "rgb.json", {32, 32, 3}, kClasses);
  const std::string ten = WriteModel(dir / "ten.json", {32, 32, 3}, 10);
  const std::string grey = WriteModel(dir / "grey.json", {28, 28, 1}, kClasses);
  const std::vector<std::string> folder = {"--dataset-format", "folder",      "--train-data",
                                           d.Folder("train"),  "--eval-data", d.Folder("test")};
  const std::string missing = dir / "none";
  struct Refusal {
    std::vector<std::string> flags;
    std::vector<std::string> messages;
  };
  const std::vector<Refusal> refusals = {
      {With({"--model-config", grey}, folder),
       {"the model's input is (28, 28, 1) and the dataset's images are (32, 32, 3) (image "
        "folder " +
            d.Folder("train") + ")",
        "declare the model's input as keras.Input(shape=(32, 32, 3))"}},
      {With({"--model-config", ten}, folder),
       {"the model's output is (10,) and the dataset has 4 classes (labels 0-3)",
        "end the model with Dense(4)"}},
      {{"--model-config", rgb, "--dataset-format", "folder", "--train-data", missing, "--eval-data",
        d.Folder("test")},
       {"--train-data " + missing + ": " + missing + " does not exist",
        "give --dataset-format folder the root of <class>/<image> folders"}},
      {{"--model-config", rgb, "--dataset-format", "folder", "--train-data", d.Folder("train")},
       {"--dataset-format folder needs --eval-data"}},
      {{"--model-config", rgb, "--dataset-format", "npz", "--train-data", d.Npz(),
        "--image-channels", "1"},
       {"--image-channels 1: .npz " + d.Npz() + " (train) holds 32x32x3 images",
        "give --image-channels 3"}},
      {With({"--model-config", rgb, "--image-size", "32"}, folder),
       {"--image-size 32: expected HEIGHTxWIDTH"}},
      {With({"--model-config", rgb, "--normalize-std", "0.2,0,0.2"}, folder),
       {"--normalize-std 0.2,0,0.2: expected one positive number per channel"}},
      {With({"--model-config", rgb, "--normalize-mean", "0.5"}, folder),
       {"--normalize-mean: 1 values for images of 3 channels"}},
      {{"--model-config", rgb, "--dataset-format", "bmp"}, {"--dataset-format"}},
      {folder,
       {"--dataset-format folder: the built-in seeds' CNN trains on the IDX files of "
        "--data-dir only"}},
  };
  int i = 0;
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(i);
    auto p = StartTrainer(With({"--epochs", "1", "--threads", "1"}, r.flags), "",
                          dir / ("refused" + std::to_string(i++)));
    ASSERT_EQ(p->Wait(60s), 2) << p->Stderr();
    for (const std::string& m : r.messages) {
      EXPECT_NE(p->Stderr().find(m), std::string::npos) << "expected \"" << m << "\" in\n"
                                                        << p->Stderr();
    }
    EXPECT_TRUE(Events(*p, "first_step").empty());
  }

  // A backup of these images does not resume on other images, nor with another augmentation.
  const std::vector<std::string> backed_up = {"--model-config",
                                              rgb,
                                              "--epochs",
                                              "1",
                                              "--batch-size",
                                              "8",
                                              "--threads",
                                              "1",
                                              "--steps-per-epoch",
                                              "2",
                                              "--backup-dir",
                                              dir / "backup",
                                              "--save-freq",
                                              "1",
                                              "--keep-backup",
                                              "--dataset-format",
                                              "folder",
                                              "--eval-data",
                                              d.Folder("test")};
  auto first = StartTrainer(With(With(backed_up, {"--train-data", d.Folder("train")}), Augmented()),
                            "", dir / "first");
  ASSERT_EQ(first->Wait(60s), 0) << first->Stderr();
  fs::copy(d.Folder("train"), dir / "other", fs::copy_options::recursive);
  WriteFile(dir / "other/c0/10.png", *data::EncodePng(PatternImage(kShape, 999), kShape));
  auto other = StartTrainer(With(With(backed_up, {"--train-data", dir / "other"}), Augmented()), "",
                            dir / "other_run");
  ASSERT_EQ(other->Wait(60s), 1) << other->Stderr();
  EXPECT_NE(other->Stderr().find("was written by a run with another configuration"),
            std::string::npos)
      << other->Stderr();
  EXPECT_NE(other->Stderr().find("dataset_sha256"), std::string::npos) << other->Stderr();
  auto padded =
      StartTrainer(With(With(backed_up, {"--train-data", d.Folder("train")}), Augmented("3")), "",
                   dir / "padded");
  ASSERT_EQ(padded->Wait(60s), 1) << padded->Stderr();
  EXPECT_NE(padded->Stderr().find("augment_crop_pad"), std::string::npos) << padded->Stderr();
}

}  // namespace
}  // namespace tj::testing
