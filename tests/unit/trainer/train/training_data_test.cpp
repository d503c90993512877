// The dataset flags of a declared model (training_data.h): which combinations are refused
// before anything opens, the checks of the opened sets against the flags and each other, and
// what the fingerprint and the prefetcher take from them.
#include "trainer/train/training_data.h"

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace tj::train {
namespace {

using tj::testing::TempDir;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::unique_ptr<data::ImageDataset> Images(const std::string& source, data::ImageShape shape,
                                           int classes, int count) {
  std::vector<uint8_t> pixels(shape.Size() * static_cast<size_t>(count), 7);
  std::vector<int32_t> labels(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) labels[static_cast<size_t>(i)] = i % classes;
  auto made =
      data::InMemoryDataset::Create(source, shape, classes, std::move(pixels), std::move(labels));
  EXPECT_TRUE(made.ok());
  return std::move(*made);
}

TEST(TrainingData, FormatNamesRoundTrip) {
  for (const char* name : {"idx", "npz", "npy", "folder", "tfrecord"}) {
    DatasetFormat f = DatasetFormat::kIdx;
    ASSERT_TRUE(ParseDatasetFormat(name, &f)) << name;
    EXPECT_STREQ(DatasetFormatName(f), name);
  }
  DatasetFormat f = DatasetFormat::kIdx;
  EXPECT_FALSE(ParseDatasetFormat("bmp", &f));
}

TEST(TrainingData, FlagsThatDoNotFitTogetherAreRefusedNamingTheFlag) {
  TempDir dir;
  dir.Write("train/a/1.png", "x");
  Options o;
  EXPECT_EQ(DatasetFlagsError(o, false), "");  // the built-in model on its IDX files
  o.data.format = DatasetFormat::kFolder;
  EXPECT_TRUE(Contains(DatasetFlagsError(o, false), "the built-in seeds' CNN trains on the IDX"));
  EXPECT_TRUE(Contains(DatasetFlagsError(o, true), "--dataset-format folder needs --train-data"));
  o.data.train_path = dir.Join("train");
  EXPECT_TRUE(Contains(DatasetFlagsError(o, true), "needs --eval-data"));
  o.data.eval_path = dir.Join("none");
  EXPECT_TRUE(Contains(DatasetFlagsError(o, true), "--eval-data " + dir.Join("none") + ": " +
                                                       dir.Join("none") + " does not exist"));
  o.data.eval_path = dir.Join("train");
  EXPECT_EQ(DatasetFlagsError(o, true), "");
  o.data.normalization.mean = {0.5f};
  EXPECT_TRUE(Contains(DatasetFlagsError(o, true), "--normalize-mean: 1 values for images of 3"));

  Options npy;
  npy.data.format = DatasetFormat::kNpy;
  npy.data.train_path = dir.Join("x.npy");
  EXPECT_TRUE(Contains(DatasetFlagsError(npy, true), "IMAGES.npy,LABELS.npy"));
  Options idx;
  idx.data.eval_path = "/e";
  EXPECT_TRUE(Contains(DatasetFlagsError(idx, true), "drop --eval-data"));
  Options augmented;
  augmented.data.augment.flip = true;
  EXPECT_TRUE(Contains(DatasetFlagsError(augmented, false), "apply to declared models"));

  // An evaluator needs only the evaluation set.
  Options evaluator;
  evaluator.data.format = DatasetFormat::kFolder;
  EXPECT_TRUE(Contains(DatasetFlagsError(evaluator, true, true),
                       "needs --train-data: the root of <class>/<image> folders (an evaluator "
                       "may give --eval-data alone)"))
      << DatasetFlagsError(evaluator, true, true);
  evaluator.data.eval_path = dir.Join("train");
  EXPECT_EQ(DatasetFlagsError(evaluator, true, true), "");
  EXPECT_TRUE(Contains(DatasetFlagsError(evaluator, true, false), "needs --train-data"));
}

TEST(TrainingData, OpenedSetsAreCheckedAgainstTheFlagsAndEachOther) {
  Options o;
  o.data.format = DatasetFormat::kNpz;
  TrainingData d{Images(".npz d (train)", {8, 8, 1}, 10, 20),
                 Images(".npz d (test)", {8, 8, 1}, 10, 5)};
  EXPECT_EQ(TrainingDataError(d, o), "");
  o.data.image = {32, 32, 0};
  EXPECT_TRUE(Contains(TrainingDataError(d, o), "--image-size 32x32: .npz d (train) holds 8x8x1"));
  o.data.image = {0, 0, 3};
  EXPECT_TRUE(Contains(TrainingDataError(d, o), "give --image-channels 1"));
  o.data.image = {};
  o.data.classes = 12;
  EXPECT_TRUE(Contains(TrainingDataError(d, o), "--num-classes 12: .npz d (train) has 10"));
  o.data.classes = 0;
  d.eval = Images(".npz e (test)", {8, 8, 1}, 4, 5);
  EXPECT_TRUE(Contains(TrainingDataError(d, o),
                       "the evaluation set .npz e (test) has 8x8x1 "
                       "images of 4 classes"));
}

TEST(TrainingData, TheFingerprintHasTheDigestShapeAndAugmentation) {
  Options o;
  o.data.format = DatasetFormat::kFolder;
  o.data.augment = {.pad = 4, .flip = true};
  o.data.normalization.stddev = {0.5f, 0.5f, 0.5f};
  const TrainingData d{Images("folder", {4, 4, 3}, 2, 4), Images("eval", {4, 4, 3}, 2, 2)};
  const nlohmann::json f = DatasetFingerprint(d, o);
  EXPECT_EQ(f["dataset_sha256"], d.train->digest());
  EXPECT_EQ(f["dataset_format"], "folder");
  EXPECT_EQ(f["image_shape"], nlohmann::json({4, 4, 3}));
  EXPECT_EQ(f["classes"], 2);
  EXPECT_EQ(f["augment_crop_pad"], 4);
  EXPECT_EQ(f["augment_flip"], true);
  // One of mean and std given: the other's default for each channel.
  const data::PrefetchOptions p = PrefetchOptionsOf(o);
  EXPECT_EQ(p.normalization.mean, std::vector<float>(3, 0.0f));
  EXPECT_NE(p.seed, o.seed);
}

}  // namespace
}  // namespace tj::train
