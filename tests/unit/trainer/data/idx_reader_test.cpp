// The IDX reader on good and bad files, gzipped and raw, written to a temporary directory.
#include "trainer/data/idx_reader.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace tj::data {
namespace {

class IdxReaderTest : public ::testing::Test {
 protected:
  static std::string Header(uint8_t type, const std::vector<uint32_t>& dims) {
    std::string h = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
    for (uint32_t d : dims) {
      for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>((d >> s) & 0xff));
    }
    return h;
  }
  std::string Write(const std::string& name, const std::string& bytes, bool gzip) {
    std::string path = dir_.Join(name);
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      tj::testing::WriteBytes(path, bytes);
    }
    return path;
  }
  // A tiny valid dataset: n images of 28x28 and n labels.
  void WriteSplit(const std::string& prefix, int n, bool gzip) {
    std::string images = Header(8, {static_cast<uint32_t>(n), 28, 28}) +
                         std::string(static_cast<size_t>(n) * 784, '\x80');
    std::string labels = Header(8, {static_cast<uint32_t>(n)});
    for (int i = 0; i < n; ++i) labels.push_back(static_cast<char>(i % 10));
    std::string ext = gzip ? ".gz" : "";
    Write(prefix + "-images-idx3-ubyte" + ext, images, gzip);
    Write(prefix + "-labels-idx1-ubyte" + ext, labels, gzip);
  }
  const tj::testing::TempDir dir_{"tj-idx"};
};

TEST_F(IdxReaderTest, ReadsRawAndGzip) {
  for (bool gzip : {false, true}) {
    std::string path = Write(gzip ? "a.gz" : "a", Header(8, {2, 3}) + "abcdef", gzip);
    auto r = ReadIdxFile(path);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->dims, (std::vector<uint32_t>{2, 3}));
    EXPECT_EQ(std::string(r->values.begin(), r->values.end()), "abcdef");
  }
}

TEST_F(IdxReaderTest, BadFilesNameTheFileAndTheProblem) {
  struct Case {
    std::string name, bytes, expected;
    bool gzip;
  };
  std::string good = Header(8, {2, 3}) + "abcdef";
  std::vector<Case> cases = {
      {"empty", "", "too short for the 4-byte IDX magic", false},
      {"text", "hello world", "not an IDX file", false},
      {"float", Header(0x0d, {2}) + "12345678", "unsupported element type 0x0d", false},
      {"dims", Header(8, {}) + "", "unsupported number of dimensions 0", false},
      {"short-header", good.substr(0, 9), "truncated in the header", false},
      {"short-data", good.substr(0, good.size() - 2),
       "truncated: the header announces 6 values but the file holds 4", false},
      {"long-data", good + "xy", "2 unexpected bytes after the 6 announced values", false},
      {"short-gz", good.substr(0, good.size() - 1), "truncated", true},
  };
  for (const Case& c : cases) {
    std::string path = Write(c.name, c.bytes, c.gzip);
    auto r = ReadIdxFile(path);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << r.status().message();
  }
  auto missing = ReadIdxFile(dir_.Join("nope.gz"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("file not found"), std::string::npos);
}

TEST_F(IdxReaderTest, CorruptGzipStreamIsAnError) {
  // A real gzip file cut in the middle of its deflate stream.
  std::string path = Write("full.gz", Header(8, {4096}) + std::string(4096, 'x'), true);
  const std::string bytes = tj::testing::ReadBytes(path);
  std::string cut = Write("cut.gz", bytes.substr(0, bytes.size() / 2), false);
  auto r = ReadIdxFile(cut);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(cut), std::string::npos);
}

TEST_F(IdxReaderTest, LoadsADatasetDirectory) {
  WriteSplit("train", 20, true);
  WriteSplit("t10k", 10, false);
  auto d = LoadDataset(dir_.path());
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->train.count, 20);
  EXPECT_EQ(d->test.count, 10);
  EXPECT_FLOAT_EQ(d->train.images[0], 128.0f / 255.0f);
  EXPECT_EQ(d->test.labels[9], 9);
  EXPECT_EQ(d->digest.size(), 64u);
}

TEST_F(IdxReaderTest, DatasetMismatchesAreErrors) {
  WriteSplit("train", 20, true);
  // Labels count differs from images.
  Write("t10k-images-idx3-ubyte", Header(8, {3, 28, 28}) + std::string(3 * 784, 'a'), false);
  Write("t10k-labels-idx1-ubyte", Header(8, {2}) + std::string("\x01\x02"), false);
  auto d = LoadDataset(dir_.path());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("3 images"), std::string::npos) << d.status().message();
  auto none = LoadDataset(dir_.Join("absent"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("does not exist"), std::string::npos);
}

TEST_F(IdxReaderTest, LabelOutOfRange) {
  WriteSplit("train", 20, true);
  Write("t10k-images-idx3-ubyte", Header(8, {1, 28, 28}) + std::string(784, 'a'), false);
  Write("t10k-labels-idx1-ubyte", Header(8, {1}) + std::string("\x0c"), false);
  auto d = LoadDataset(dir_.path());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("label 12 at index 0"), std::string::npos)
      << d.status().message();
}

}  // namespace
}  // namespace tj::data
