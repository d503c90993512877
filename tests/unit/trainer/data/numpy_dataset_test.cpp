// .npy and .npz files written here byte by byte (NumPy's header, zip stored and deflated, zip64
// local headers as numpy.savez writes them): dtypes, shapes, the float rule, the digest, and
// every malformed array and archive refused.
#include "trainer/data/numpy_dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/unit/trainer/data/dataset_files.h"
#include "trainer/data/zip_reader.h"

namespace tj::data {
namespace {

using testing::NpyBytes;
using testing::ZipBytes;

std::string Floats(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::string Int64s(const std::vector<int64_t>& v) {
  std::string s(v.size() * 8, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// 3 images of 2 x 2, pixel values 0..11, labels 2, 0, 1.
std::string Images() {
  return NpyBytes("|u1", {3, 2, 2}, std::string("\0\1\2\3\4\5\6\7\10\11\12\13", 12));
}
std::string Labels() { return NpyBytes("|u1", {3}, std::string("\2\0\1", 3)); }

TEST(NpyTest, ParsesTheHeaderAndKeepsTheData) {
  const std::string bytes = Images();
  auto a = ParseNpy(std::vector<uint8_t>(bytes.begin(), bytes.end()));
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->type, NpyType::kUint8);
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{3, 2, 2}));
  EXPECT_EQ(a->data.size(), 12u);
  EXPECT_EQ(a->data[11], 11);
}

TEST(NpyTest, RefusesMalformedArrays) {
  struct Case {
    std::string name;
    std::string bytes;
    std::string expected;
  };
  std::string v9 = Images();
  v9[6] = 9;
  std::string long_header = "\x93NUMPY\x02";
  long_header += std::string("\0\0\0\x10\0", 5);  // version 2.0, 1 MiB header
  const std::vector<Case> cases = {
      {"magic", "NUMPY...", "no \\x93NUMPY magic"},
      {"version", v9, "format version 9.0 is not supported"},
      {"header too long", long_header, "over the limit of 65536"},
      {"big-endian", NpyBytes(">f4", {1, 1, 1}, "abcd"), "big-endian"},
      {"structured", NpyBytes("|u1", {1}, "a").replace(20, 6, "[('a',"), "structured dtype"},
      {"fortran", NpyBytes("|u1", {2, 2}, "abcd", "True"), "Fortran"},
      {"bool", NpyBytes("|b1", {1}, "a"), "dtype '|b1' is not supported"},
      {"truncated data", NpyBytes("|u1", {2, 2}, "abc"),
       "truncated: shape (2, 2) of |u1 needs 4 bytes of data, the file has 3"},
      {"trailing data", NpyBytes("|u1", {2}, "abc"), "needs 2 bytes of data, the file has 3"},
      {"overflow", NpyBytes("<f8", {4294967296, 4294967296}, ""), "overflows"},
      {"missing key", std::string("\x93NUMPY\x01\x00\x12\x00{'descr': '|u1', }", 28),
       "lacks one of"},
      {"unknown key", NpyBytes("|u1", {1}, "a").replace(12, 5, "dtype"), "unknown key 'dtype'"},
  };
  for (const Case& c : cases) {
    auto r = ParseNpy(std::vector<uint8_t>(c.bytes.begin(), c.bytes.end()));
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << r.status().message();
  }
}

TEST(NumpyDatasetTest, ReadsAnNpzStoredOrDeflatedWithZip64LocalHeaders) {
  for (bool deflate : {false, true}) {
    for (bool zip64 : {false, true}) {
      tj::testing::TempDir dir("tj-npz");
      const std::string path =
          dir.Write("d.npz", ZipBytes({{"x_train.npy", Images()},
                                       {"y_train.npy", Labels()},
                                       {"x_test.npy", NpyBytes("|u1", {1, 2, 2}, "abcd")},
                                       {"y_test.npy", NpyBytes("<i8", {1, 1}, Int64s({4}))}},
                                      deflate, zip64));
      auto train = OpenNpzDataset(path, "train", NumpyOptions{});
      ASSERT_TRUE(train.ok()) << train.status().message();
      EXPECT_EQ((*train)->size(), 3);
      EXPECT_EQ((*train)->shape(), (ImageShape{2, 2, 1}));
      EXPECT_EQ((*train)->classes(), 3);
      EXPECT_EQ((*train)->Label(0), 2);
      std::vector<uint8_t> pixels(4);
      ASSERT_TRUE((*train)->ReadImage(2, pixels).ok());
      EXPECT_EQ(pixels, (std::vector<uint8_t>{8, 9, 10, 11}));
      auto test = OpenNpzDataset(path, "test", NumpyOptions{10, uint64_t{1} << 20});
      ASSERT_TRUE(test.ok()) << test.status().message();
      EXPECT_EQ((*test)->classes(), 10);
      EXPECT_EQ((*test)->Label(0), 4);
    }
  }
}

TEST(NumpyDatasetTest, ConvertsFloatImagesByTheDocumentedRule) {
  tj::testing::TempDir dir("tj-npy");
  const std::string labels = dir.Write("y.npy", NpyBytes("<i4", {1}, std::string(4, '\0')));
  const std::string unit =
      dir.Write("unit.npy", NpyBytes("<f4", {1, 1, 1, 3}, Floats({0.0f, 0.5f, 1.0f})));
  const std::string bytes =
      dir.Write("bytes.npy", NpyBytes("<f4", {1, 1, 1, 3}, Floats({0.0f, 2.4f, 254.6f})));
  std::vector<uint8_t> pixels(3);
  auto d = OpenNpyDataset(unit, labels, NumpyOptions{});
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->shape(), (ImageShape{1, 1, 3}));
  ASSERT_TRUE((*d)->ReadImage(0, pixels).ok());
  EXPECT_EQ(pixels, (std::vector<uint8_t>{0, 128, 255}));
  d = OpenNpyDataset(bytes, labels, NumpyOptions{});
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->ReadImage(0, pixels).ok());
  EXPECT_EQ(pixels, (std::vector<uint8_t>{0, 2, 255}));
  for (float bad : {-0.5f, 256.0f, std::numeric_limits<float>::quiet_NaN()}) {
    const std::string p = dir.Write("bad.npy", NpyBytes("<f4", {1, 1, 1}, Floats({bad})));
    auto r = OpenNpyDataset(p, labels, NumpyOptions{});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("at flat index 0 is outside [0, 255]"), std::string::npos)
        << r.status().message();
  }
}

TEST(NumpyDatasetTest, DigestIsThePixelsAndLabelsWhateverTheContainer) {
  tj::testing::TempDir dir("tj-npy");
  const std::string x = dir.Write("x.npy", Images());
  const std::string y = dir.Write("y.npy", NpyBytes("<i8", {3, 1}, Int64s({2, 0, 1})));
  const std::string npz =
      dir.Write("d.npz", ZipBytes({{"x_train.npy", Images()}, {"y_train.npy", Labels()}}, true));
  auto a = OpenNpyDataset(x, y, NumpyOptions{});
  auto b = OpenNpzDataset(npz, "train", NumpyOptions{});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->digest(), (*b)->digest());
  std::vector<uint8_t> images(12);
  for (int i = 0; i < 12; ++i) images[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  EXPECT_EQ((*a)->digest(), DigestOfImages({2, 2, 1}, 3, images, std::vector<int32_t>{2, 0, 1}));
}

TEST(NumpyDatasetTest, RefusesArraysThatAreNotADataset) {
  struct Case {
    std::string name;
    std::string images;
    std::string labels;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"2-d images", NpyBytes("|u1", {3, 4}, std::string(12, 'a')), Labels(),
       "shape (3, 4): expected N x H x W or N x H x W x C"},
      {"17 channels", NpyBytes("|u1", {1, 1, 1, 17}, std::string(17, 'a')),
       NpyBytes("|u1", {1}, "a"), "channels 1..16"},
      {"int images", NpyBytes("<i4", {1, 1, 1}, std::string(4, 'a')),
       NpyBytes("|u1", {1}, std::string(1, '\0')), "only uint8 and float32 images"},
      {"count mismatch", Images(), NpyBytes("|u1", {2}, "ab"), "3 images but 2 labels"},
      {"float labels", Images(), NpyBytes("<f4", {3}, std::string(12, '\0')),
       "labels must be integers"},
      {"2-d labels", Images(), NpyBytes("|u1", {3, 2}, std::string(6, '\0')),
       "expected N or N x 1"},
      {"negative label", Images(), NpyBytes("<i8", {3}, Int64s({0, -1, 0})),
       "label -1 at index 1 is not a class"},
      {"no examples", NpyBytes("|u1", {0, 2, 2}, ""), NpyBytes("|u1", {0}, ""),
       "holds no examples"},
  };
  for (const Case& c : cases) {
    tj::testing::TempDir dir("tj-npy-bad");
    auto r =
        OpenNpyDataset(dir.Write("x.npy", c.images), dir.Write("y.npy", c.labels), NumpyOptions{});
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << r.status().message();
  }
  tj::testing::TempDir dir("tj-npy-bad");
  auto r = OpenNpyDataset(dir.Write("x.npy", Images()), dir.Write("y.npy", Labels()),
                          NumpyOptions{2, uint64_t{1} << 20});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("label 2 at index 0 is not a class 0..1"), std::string::npos);
}

TEST(NumpyDatasetTest, RefusesDamagedArchivesNamingTheEntry) {
  const std::string good = ZipBytes({{"x_train.npy", Images()}, {"y_train.npy", Labels()}}, true);
  std::string bad_crc = ZipBytes({{"x_train.npy", Images()}, {"y_train.npy", Labels()}}, false);
  bad_crc[30 + 11 + 70] ^= 1;  // a pixel of x_train (after the 30-byte header and name)
  std::string bad_deflate = good;
  for (size_t i = 30 + 11; i < 30 + 11 + 8; ++i) bad_deflate[i] = '\xff';
  std::string bad_method = good;
  bad_method[8] = 12;  // bzip2 in the local header; and in the central directory:
  bad_method[bad_method.find(std::string("PK\1\2", 4)) + 10] = 12;
  struct Case {
    std::string name;
    std::string bytes;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"not a zip", "hello", "too short for a zip archive"},
      {"no end record", std::string(100, 'z'), "no end of central directory record"},
      {"truncated", good.substr(0, good.size() - 30), "no end of central directory"},
      {"missing key", ZipBytes({{"x_train.npy", Images()}}, false),
       "no array 'y_train' (expected x_train, y_train, x_test, y_test as keras.datasets; it "
       "holds: x_train.npy)"},
      {"crc", bad_crc, "entry x_train.npy: its CRC-32 does not match"},
      {"deflate", bad_deflate, "entry x_train.npy: corrupt deflate data"},
      {"method", bad_method, "compression method 12 is not supported"},
  };
  for (const Case& c : cases) {
    tj::testing::TempDir dir("tj-npz-bad");
    const std::string path = dir.Write("d.npz", c.bytes);
    auto r = OpenNpzDataset(path, "train", NumpyOptions{});
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << r.status().message();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << c.name;
  }
  tj::testing::TempDir dir("tj-npz");
  // The limit is on the array; its .npy header may add up to 64 KiB.
  const std::string large =
      ZipBytes({{"x_train.npy", NpyBytes("|u1", {1, 280, 250}, std::string(70000, 'a'))},
                {"y_train.npy", NpyBytes("|u1", {1}, std::string(1, '\0'))}},
               true);
  auto small = OpenNpzDataset(dir.Write("d.npz", large), "train", NumpyOptions{0, 1000});
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("bytes uncompressed, over the limit"), std::string::npos)
      << small.status().message();
  EXPECT_FALSE(OpenNpzDataset(dir / "d.npz", "validation", NumpyOptions{}).ok());
}

TEST(ZipArchiveTest, ListsEntriesAndReadsAnEmptyOne) {
  tj::testing::TempDir dir("tj-zip");
  auto zip = ZipArchive::Open(dir.Write("a.zip", ZipBytes({{"a", ""}, {"b", "bee"}}, true)));
  ASSERT_TRUE(zip.ok()) << zip.status().message();
  EXPECT_EQ(zip->names(), (std::vector<std::string>{"a", "b"}));
  auto a = zip->Read("a", 10);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE(a->empty());
  auto b = zip->Read("b", 10);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(std::string(b->begin(), b->end()), "bee");
  EXPECT_FALSE(zip->Read("c", 10).ok());
}

}  // namespace
}  // namespace tj::data
