// Image folders written here (PNG and JPEG through the same libraries): the classes and
// labels, the pixels, the digest, and every layout and file the reader refuses.
#include "trainer/data/image_folder_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/unit/trainer/data/dataset_files.h"
#include "trainer/data/image_encoder.h"

namespace tj::data {
namespace {

using testing::PatternImage;

class ImageFolderTest : public ::testing::Test {
 protected:
  static constexpr ImageShape kShape{8, 8, 3};

  std::string Png(int seed) { return *EncodePng(PatternImage(kShape, seed), kShape); }
  std::string Jpeg(int seed) { return *EncodeJpeg(PatternImage(kShape, seed), kShape); }

  // cat/{a.png, b.JPG}, dog/{c.jpeg}, .hidden/x.txt, .DS_Store
  void WriteTree() {
    dir_.Write("cat/a.png", Png(1));
    dir_.Write("cat/b.JPG", Jpeg(2));
    dir_.Write("dog/c.jpeg", Jpeg(3));
    dir_.Write(".hidden/x.txt", "ignored");
    dir_.Write(".DS_Store", "ignored");
    dir_.Write("dog/.thumbs", "ignored");
  }

  static ImageFolderOptions Options() {
    ImageFolderOptions o;
    o.shape = kShape;
    return o;
  }

  tj::testing::TempDir dir_{"tj-folder"};
};

TEST_F(ImageFolderTest, ClassesAreFoldersSortedAndExamplesAreFilesSorted) {
  WriteTree();
  auto d = OpenImageFolder(dir_.path(), Options());
  ASSERT_TRUE(d.ok()) << d.status().message();
  const ImageDataset& ds = **d;
  EXPECT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.classes(), 2);
  EXPECT_EQ(ds.shape(), kShape);
  EXPECT_EQ(ds.Label(0), 0);
  EXPECT_EQ(ds.Label(1), 0);
  EXPECT_EQ(ds.Label(2), 1);
  EXPECT_EQ(ds.source(), "image folder " + dir_.path());
  std::vector<uint8_t> pixels(kShape.Size());
  ASSERT_TRUE(ds.ReadImage(0, pixels).ok());
  EXPECT_EQ(pixels, PatternImage(kShape, 1));  // PNG: exact
  for (int i : {1, 2}) {
    Status s = ds.ReadImage(i, pixels);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  EXPECT_EQ(ds.digest().size(), 64u);
}

TEST_F(ImageFolderTest, FitsImagesOfOtherSizesAndTakesTheFirstImagesSizeWhenUnset) {
  const ImageShape big{16, 24, 3};
  dir_.Write("a/1.png", *EncodePng(PatternImage(big, 1), big));
  dir_.Write("b/2.png", Png(2));
  ImageFolderOptions o = Options();
  auto d = OpenImageFolder(dir_.path(), o);
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::vector<uint8_t> pixels(kShape.Size());
  ASSERT_TRUE((*d)->ReadImage(0, pixels).ok());

  o.shape = {0, 0, 1};
  auto first = OpenImageFolder(dir_.path(), o);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ((*first)->shape(), (ImageShape{16, 24, 1}));
  std::vector<uint8_t> grey((*first)->shape().Size());
  ASSERT_TRUE((*first)->ReadImage(1, grey).ok());  // 8 x 8 scaled up to 16 x 24
}

TEST_F(ImageFolderTest, DigestFollowsContentNamesAndShape) {
  WriteTree();
  const std::string before = (*OpenImageFolder(dir_.path(), Options()))->digest();
  EXPECT_EQ((*OpenImageFolder(dir_.path(), Options()))->digest(), before);
  ImageFolderOptions other = Options();
  other.shape = {4, 4, 3};
  EXPECT_NE((*OpenImageFolder(dir_.path(), other))->digest(), before);
  ImageFolderOptions names_only = Options();
  names_only.content_digest = false;
  const std::string by_names = (*OpenImageFolder(dir_.path(), names_only))->digest();
  dir_.Write("cat/a.png", Png(4));  // same name, other bytes
  EXPECT_NE((*OpenImageFolder(dir_.path(), Options()))->digest(), before);
  std::filesystem::rename(dir_ / "dog", dir_ / "wolf");
  EXPECT_NE((*OpenImageFolder(dir_.path(), names_only))->digest(), by_names);
}

TEST_F(ImageFolderTest, RefusesLayoutsItDoesNotKnowNamingTheEntry) {
  struct Case {
    std::string name;
    std::vector<std::pair<std::string, std::string>> files;
    std::vector<std::string> dirs;
    std::string expected;
  };
  const std::string png = Png(1);
  const std::vector<Case> cases = {
      {"file at the root",
       {{"a/x.png", png}, {"y.png", png}},
       {},
       "y.png is a file directly under the root"},
      {"nested folder",
       {{"a/x.png", png}, {"a/deeper/y.png", png}},
       {},
       "a/deeper is a folder inside a class folder"},
      {"other extension",
       {{"a/x.png", png}, {"a/notes.txt", "x"}},
       {},
       "a/notes.txt is not a .jpg, .jpeg or .png file"},
      {"empty class", {{"a/x.png", png}}, {"b"}, "class folder b holds no images"},
      {"no classes", {}, {}, "no class folders"},
      {"not an image", {{"a/x.png", "GIF89a...."}}, {}, "a/x.png: neither JPEG nor PNG"},
  };
  for (const Case& c : cases) {
    tj::testing::TempDir dir("tj-folder-bad");
    for (const auto& [name, bytes] : c.files) dir.Write(name, bytes);
    for (const std::string& d : c.dirs) std::filesystem::create_directories(dir / d);
    auto r = OpenImageFolder(dir.path(), Options());
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << r.status().message();
    EXPECT_NE(r.status().message().find(dir.path()), std::string::npos) << c.name;
  }
  auto missing = OpenImageFolder(dir_ / "nothing-here", Options());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("not a directory"), std::string::npos);
}

TEST_F(ImageFolderTest, RefusesFilesOverTheSizeLimitAndBadOptions) {
  WriteTree();
  ImageFolderOptions o = Options();
  o.max_file_bytes = 100;
  auto r = OpenImageFolder(dir_.path(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("over the limit of 100"), std::string::npos)
      << r.status().message();
  o = Options();
  o.shape.channels = 2;
  EXPECT_FALSE(OpenImageFolder(dir_.path(), o).ok());
  o = Options();
  o.shape = {8, 0, 3};
  EXPECT_FALSE(OpenImageFolder(dir_.path(), o).ok());
}

TEST_F(ImageFolderTest, AnUndecodableImageIsAnErrorNamingItsFile) {
  std::string jpeg = Jpeg(1);
  dir_.Write("a/good.png", Png(1));
  dir_.Write("a/truncated.jpg", jpeg.substr(0, jpeg.size() - 30));
  auto d = OpenImageFolder(dir_.path(), Options());
  ASSERT_TRUE(d.ok()) << d.status().message();  // the header is a JPEG's: found when read
  std::vector<uint8_t> pixels(kShape.Size());
  EXPECT_TRUE((*d)->ReadImage(0, pixels).ok());
  Status s = (*d)->ReadImage(1, pixels);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("image folder " + dir_.path() + ": a/truncated.jpg: corrupt JPEG"),
            std::string::npos)
      << s.message();
  // Replaced after opening by something that is no image at all.
  dir_.Write("a/good.png", "not an image any more");
  s = (*d)->ReadImage(0, pixels);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("a/good.png: neither JPEG nor PNG"), std::string::npos) << s.message();
  EXPECT_FALSE((*d)->ReadImage(2, pixels).ok());
}

}  // namespace
}  // namespace tj::data
