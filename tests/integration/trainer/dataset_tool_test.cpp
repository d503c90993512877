// tj-dataset, the real binary: Fashion-MNIST's IDX files converted to TFRecord shards and to
// image folders read back by the trainer's readers to the same labels and pixels (PNG is
// lossless; JPEG within a few levels), the same images as an .npy pair likewise, a conversion whose
// output exists already is a no-op, and bad arguments or sources are refused with exit 2 or 1 and a
// message naming them.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/trainer/data/dataset_files.h"
#include "trainer/data/dataset.h"
#include "trainer/data/image_folder_dataset.h"
#include "trainer/data/tfrecord_dataset.h"

namespace tj::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kTool = std::string(TJ_BIN_DIR) + "/tj-dataset";
const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";
constexpr int kExamples = 300;

struct ToolRun {
  int code = -1;
  std::string out, err;
};

ToolRun Tool(const TempDir& dir, std::vector<std::string> args) {
  args.insert(args.begin(), kTool);
  Subprocess p(args, {}, (fs::path(dir.path()) / "tool").string());
  ToolRun r;
  r.code = p.Wait(120s).value_or(-1);
  r.out = p.Stdout();
  r.err = p.Stderr();
  return r;
}

class DatasetToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(std::string(kFashionMnist) + "/train-labels-idx1-ubyte.gz") &&
        !fs::exists(std::string(kFashionMnist) + "/train-labels-idx1-ubyte")) {
      if (std::getenv("TJ_REQUIRE_DATASET") != nullptr)
        FAIL() << "no Fashion-MNIST in " << kFashionMnist;
      GTEST_SKIP() << "no Fashion-MNIST in " << kFashionMnist << " (make deps installs it)";
    }
    auto source = data::OpenIdxDataset(kFashionMnist, "train");
    ASSERT_TRUE(source.ok()) << source.status().message();
    source_ = std::move(*source);
  }

  // Every example of `got` has the label and, within `tolerance` levels, the pixels of the
  // source example `index(i)`.
  template <typename Index>
  void ExpectSameExamples(const data::ImageDataset& got, Index index, int tolerance) {
    ASSERT_EQ(got.size(), kExamples);
    ASSERT_EQ(got.shape(), source_->shape());
    std::vector<uint8_t> want(source_->shape().Size()), have(want.size());
    int worst = 0;
    for (int i = 0; i < kExamples; ++i) {
      const int j = index(i);
      ASSERT_TRUE(got.ReadImage(i, have).ok());
      ASSERT_TRUE(source_->ReadImage(j, want).ok());
      ASSERT_EQ(got.Label(i), source_->Label(j)) << "example " << i;
      for (size_t k = 0; k < want.size(); ++k) worst = std::max(worst, std::abs(want[k] - have[k]));
    }
    EXPECT_LE(worst, tolerance);
  }

  // The TFRecord files of `dir` hold the source's first examples in order, pixel for pixel.
  void ExpectTfRecordsInSourceOrder(const std::string& dir) {
    auto files = data::ListTfRecordFiles(dir);
    ASSERT_TRUE(files.ok()) << files.status().message();
    data::TfRecordOptions options;
    options.shape = {0, 0, 1};
    options.classes = 10;
    auto got = data::OpenTfRecordDataset(*files, options);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectSameExamples(
        **got, [](int i) { return i; }, 0);
  }

  TempDir dir_{"tj-dataset-tool"};
  std::unique_ptr<data::ImageDataset> source_;
};

TEST_F(DatasetToolTest, TfRecordShardsHoldTheSourceInOrder) {
  const std::string out = dir_.path() + "/train";
  ToolRun r =
      Tool(dir_, {"convert", "--from", std::string("idx:") + kFashionMnist, "--to", "tfrecord",
                  "--out", out, "--shards", "3", "--limit", std::to_string(kExamples)});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"examples\":300"), std::string::npos) << r.out;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"data-00000-of-00003.tfrecord",
                                             "data-00001-of-00003.tfrecord",
                                             "data-00002-of-00003.tfrecord"}));
  ExpectTfRecordsInSourceOrder(out);
  // Nothing is left beside the output.
  for (const auto& e : fs::directory_iterator(dir_.path())) {
    EXPECT_EQ(e.path().filename().string().find(".partial-"), std::string::npos) << e.path();
  }
}

TEST_F(DatasetToolTest, ImageFoldersHoldTheSourceClassByClass) {
  const std::string out = dir_.path() + "/folder";
  ToolRun r = Tool(dir_, {"convert", "--from", std::string("idx:") + kFashionMnist, "--to",
                          "folder", "--out", out, "--limit", std::to_string(kExamples)});
  ASSERT_EQ(r.code, 0) << r.err;
  data::ImageFolderOptions options;
  options.shape = {0, 0, 1};
  auto got = data::OpenImageFolder(out, options);
  ASSERT_TRUE(got.ok()) << got.status().message();
  // A folder lists class by class, and within a class by the zero-padded source index.
  std::vector<int> order(kExamples);
  for (int i = 0; i < kExamples; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return source_->Label(a) < source_->Label(b); });
  ExpectSameExamples(
      **got, [&](int i) { return order[i]; }, 0);
}

TEST_F(DatasetToolTest, AnNpyPairConvertsLikeTheImagesItHolds) {
  // The source's first examples as NumPy writes them: uint8 (N, 28, 28), int64 labels.
  std::string pixels, labels;
  std::vector<uint8_t> image(source_->shape().Size());
  for (int i = 0; i < kExamples; ++i) {
    ASSERT_TRUE(source_->ReadImage(i, image).ok());
    pixels.append(image.begin(), image.end());
    AppendLittleEndian<uint64_t>(labels, static_cast<uint64_t>(source_->Label(i)));
  }
  const auto n = static_cast<uint64_t>(kExamples);
  const std::string x = dir_.Write("x.npy", data::testing::NpyBytes("|u1", {n, 28, 28}, pixels));
  const std::string y = dir_.Write("y.npy", data::testing::NpyBytes("<i8", {n}, labels));
  const std::string out = dir_.path() + "/from-npy";
  ToolRun r = Tool(dir_, {"convert", "--from", "npy:" + x + "," + y, "--to", "tfrecord", "--out",
                          out, "--channels", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectTfRecordsInSourceOrder(out);
  // One file where two are wanted is refused, naming what to give.
  r = Tool(dir_, {"info", "npy:" + x});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("give two files, IMAGES.npy,LABELS.npy"), std::string::npos) << r.err;
}

TEST_F(DatasetToolTest, JpegIsCloseAndAFinishedOutputIsKept) {
  const std::string out = dir_.path() + "/jpeg";
  const std::vector<std::string> convert = {"convert",
                                            "--from",
                                            std::string("idx:") + kFashionMnist,
                                            "--to",
                                            "tfrecord",
                                            "--out",
                                            out,
                                            "--image-format",
                                            "jpeg",
                                            "--quality",
                                            "100",
                                            "--limit",
                                            std::to_string(kExamples)};
  ToolRun r = Tool(dir_, convert);
  ASSERT_EQ(r.code, 0) << r.err;
  auto files = data::ListTfRecordFiles(out);
  ASSERT_TRUE(files.ok());
  data::TfRecordOptions options;
  options.shape = {0, 0, 1};
  auto got = data::OpenTfRecordDataset(*files, options);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectSameExamples(
      **got, [](int i) { return i; }, 4);
  // Again: another pod finished it; nothing is written, exit 0.
  const auto before = fs::last_write_time(files->front());
  r = Tool(dir_, convert);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("exists already"), std::string::npos) << r.err;
  EXPECT_EQ(fs::last_write_time(files->front()), before);
}

TEST_F(DatasetToolTest, RefusesBadArgumentsAndSources) {
  const std::string idx = std::string("idx:") + kFashionMnist;
  const std::string out = dir_.path() + "/x";
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{}, 2, "no command"},
      {{"shuffle"}, 2, "unknown command 'shuffle'"},
      {{"convert", "--from", idx, "--to", "csv", "--out", out},
       2,
       "--to 'csv': tfrecord or folder"},
      {{"convert", "--from", kFashionMnist, "--to", "folder", "--out", out},
       2,
       "is not FORMAT:PATH"},
      {{"convert", "--from", idx, "--to", "folder"}, 2, "convert needs --to and --out"},
      {{"convert", "--from", idx, "--to", "folder", "--out", out, "--shards", "0"},
       2,
       "--shards '0'"},
      {{"info", idx, "--size", "32"}, 2, "--size '32': HxW"},
      {{"info", "csv:/data"}, 2, "source format 'csv': idx, npz, npy, folder or tfrecord"},
      {{"convert", "--from", "npz:" + dir_.path() + "/none.npz", "--to", "folder", "--out", out},
       1,
       "none.npz"},
  };
  for (const Case& c : cases) {
    ToolRun r = Tool(dir_, c.args);
    EXPECT_EQ(r.code, c.code) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << "wanted '" << c.says << "' in: " << r.err;
  }
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace tj::testing
