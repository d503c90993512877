// The in-memory dataset and the IDX split behind the dataset interface.
#include "trainer/data/dataset.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace tj::data {
namespace {

TEST(ImageShapeTest, ParsesHeightByWidthAndRefusesTheRest) {
  ImageShape shape{0, 0, 3};
  ASSERT_TRUE(ParseImageSize("32x24", &shape));
  EXPECT_EQ(shape, (ImageShape{32, 24, 3}));
  ASSERT_TRUE(ParseImageSize("32768x1", &shape));
  EXPECT_EQ(shape, (ImageShape{32768, 1, 3}));
  for (const char* bad : {"", "32", "x32", "32x", "32x32x3", "0x32", "32x0", "32768x32769", "a x b",
                          "32x32 ", "-1x4"}) {
    ImageShape untouched{7, 7, 1};
    EXPECT_FALSE(ParseImageSize(bad, &untouched)) << "'" << bad << "'";
    EXPECT_EQ(untouched, (ImageShape{7, 7, 1})) << "'" << bad << "'";
  }
}

TEST(InMemoryDatasetTest, HoldsImagesAndLabelsAndChecksThem) {
  auto d = InMemoryDataset::Create("t", {1, 2, 1}, 3, {1, 2, 3, 4}, {2, 0});
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->size(), 2);
  EXPECT_EQ((*d)->Label(0), 2);
  std::vector<uint8_t> px(2);
  ASSERT_TRUE((*d)->ReadImage(1, px).ok());
  EXPECT_EQ(px, (std::vector<uint8_t>{3, 4}));
  EXPECT_FALSE((*d)->ReadImage(2, px).ok());
  EXPECT_FALSE((*d)->ReadImage(-1, px).ok());
  EXPECT_EQ((*d)->digest(), DigestOfImages({1, 2, 1}, 3, std::vector<uint8_t>{1, 2, 3, 4},
                                           std::vector<int32_t>{2, 0}));
  EXPECT_NE((*d)->digest(), DigestOfImages({2, 1, 1}, 3, std::vector<uint8_t>{1, 2, 3, 4},
                                           std::vector<int32_t>{2, 0}));

  auto bad_label = InMemoryDataset::Create("t", {1, 2, 1}, 2, {1, 2, 3, 4}, {2, 0});
  ASSERT_FALSE(bad_label.ok());
  EXPECT_EQ(bad_label.status().message(), "t: label 2 of example 0 is not a class 0..1");
  auto bad_size = InMemoryDataset::Create("t", {1, 2, 1}, 3, {1, 2, 3}, {2, 0});
  ASSERT_FALSE(bad_size.ok());
  EXPECT_NE(bad_size.status().message().find("3 bytes of images are not 2 images of 1x2x1"),
            std::string::npos);
  EXPECT_FALSE(InMemoryDataset::Create("t", {0, 2, 1}, 3, {}, {}).ok());
  EXPECT_FALSE(InMemoryDataset::Create("t", {1, 1, 1}, 3, {}, {}).ok());
}

std::string Idx(const std::vector<uint32_t>& dims, const std::string& values) {
  std::string h = {0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>((d >> s) & 0xff));
  }
  return h + values;
}

TEST(IdxDatasetTest, OpensOneSplitAsAnImageDataset) {
  tj::testing::TempDir dir("tj-idx-dataset");
  std::string images(2 * 784, '\0');
  images[784 + 5] = '\x7f';
  dir.Write("train-images-idx3-ubyte", Idx({2, 28, 28}, images));
  dir.Write("train-labels-idx1-ubyte", Idx({2}, std::string("\x09\x01", 2)));
  auto d = OpenIdxDataset(dir.path(), "train");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->size(), 2);
  EXPECT_EQ((*d)->shape(), (ImageShape{28, 28, 1}));
  EXPECT_EQ((*d)->classes(), 10);
  EXPECT_EQ((*d)->Label(0), 9);
  std::vector<uint8_t> px(784);
  ASSERT_TRUE((*d)->ReadImage(1, px).ok());
  EXPECT_EQ(px[5], 0x7f);
  auto missing = OpenIdxDataset(dir.path(), "t10k");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("t10k-images-idx3-ubyte"), std::string::npos);
  EXPECT_FALSE(OpenIdxDataset(dir.path(), "validation").ok());
}

}  // namespace
}  // namespace tj::data
