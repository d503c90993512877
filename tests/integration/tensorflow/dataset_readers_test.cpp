// The trainer's dataset readers (trainer/data/) on files TensorFlow's and NumPy's own writers
// made (dataset_readers.py, in TJ_DATASET_CASES): the same labels, and the same pixels (PNG and
// arrays exactly, JPEG as TensorFlow's decode_jpeg with libjpeg's default method within one
// level). Skips without TJ_DATASET_CASES; dataset_readers_test.sh sets it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "trainer/data/image_folder_dataset.h"
#include "trainer/data/numpy_dataset.h"
#include "trainer/data/tfrecord_dataset.h"

namespace tj::data {
namespace {

constexpr int kCount = 12;
constexpr ImageShape kShape{10, 12, 3};

class DatasetReadersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TJ_DATASET_CASES");
    if (dir == nullptr) GTEST_SKIP() << "TJ_DATASET_CASES is not set (dataset_readers_test.sh)";
    dir_ = dir;
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<uint8_t> Bytes(const std::string& name) const {
    std::ifstream in(Path(name), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  std::vector<int> Labels(const std::string& name) const {
    std::ifstream in(Path(name));
    std::vector<int> out;
    for (int v; in >> v;) out.push_back(v);
    return out;
  }
  // Every example of `d` against `pixels` (count x shape bytes) and `labels`; the largest
  // pixel difference.
  static int Compare(const ImageDataset& d, const std::vector<uint8_t>& pixels,
                     const std::vector<int>& labels) {
    EXPECT_EQ(d.size(), static_cast<int>(labels.size()));
    const size_t n = d.shape().Size();
    EXPECT_EQ(pixels.size(), n * labels.size());
    int worst = 0;
    std::vector<uint8_t> image(n);
    for (int i = 0; i < d.size() && i < static_cast<int>(labels.size()); ++i) {
      EXPECT_EQ(d.Label(i), labels[static_cast<size_t>(i)]) << d.source() << " example " << i;
      Status s = d.ReadImage(i, image);
      EXPECT_TRUE(s.ok()) << s.message();
      for (size_t k = 0; k < n && (i + 1) * n <= pixels.size(); ++k) {
        worst = std::max(worst, std::abs(int{image[k]} - int{pixels[i * n + k]}));
      }
    }
    return worst;
  }
  std::string dir_;
};

TEST_F(DatasetReadersTest, TfRecordsOfPngWithImageEncodedKeys) {
  TfRecordOptions o;
  o.shape = kShape;
  auto d = OpenTfRecordDataset({Path("png.tfrecord")}, o);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(Compare(**d, Bytes("pixels.bin"), Labels("labels.txt")), 0);
}

TEST_F(DatasetReadersTest, TfRecordsOfJpegWithShortKeys) {
  TfRecordOptions o;
  o.shape = {0, 0, 3};  // the first image's size
  auto d = OpenTfRecordDataset({Path("jpeg.tfrecord")}, o);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->shape(), kShape);
  const int worst = Compare(**d, Bytes("jpeg_pixels.bin"), Labels("labels.txt"));
  std::printf("JPEG: largest difference from TensorFlow's decode_jpeg: %d\n", worst);
  EXPECT_LE(worst, 1);
}

TEST_F(DatasetReadersTest, NpzStoredAndCompressed) {
  for (const char* name : {"stored.npz", "compressed.npz"}) {
    auto train = OpenNpzDataset(Path(name), "train", NumpyOptions{});
    ASSERT_TRUE(train.ok()) << train.status().message();
    EXPECT_EQ((*train)->shape(), kShape);
    EXPECT_EQ(Compare(**train, Bytes("pixels.bin"), Labels("labels.txt")), 0) << name;
    auto test = OpenNpzDataset(Path(name), "test", NumpyOptions{});
    ASSERT_TRUE(test.ok()) << test.status().message();
    EXPECT_EQ((*test)->shape(), (ImageShape{10, 12, 1}));
    EXPECT_EQ(Compare(**test, Bytes("x_test.bin"), Labels("y_test.txt")), 0) << name;
    EXPECT_EQ((*train)->digest(), (*OpenNpzDataset(Path("stored.npz"), "train", {}))->digest());
  }
}

TEST_F(DatasetReadersTest, ImageFolderInKerasOrder) {
  ImageFolderOptions o;
  o.shape = kShape;
  auto d = OpenImageFolder(Path("folder"), o);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->classes(), 3);
  EXPECT_EQ(Compare(**d, Bytes("folder_pixels.bin"), Labels("folder_labels.txt")), 0);
}

}  // namespace
}  // namespace tj::data
