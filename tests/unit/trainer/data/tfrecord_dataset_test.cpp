// TFRecord files written here byte by byte (framing, CRCs, tf.train.Example's wire format):
// the keys read, the labels, the pixels, and every damaged file and Example refused.
#include "trainer/data/tfrecord_dataset.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/crc32c.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/trainer/data/dataset_files.h"
#include "trainer/data/image_encoder.h"
#include "trainer/data/tf_example.h"
#include "trainer/data/tfrecord_reader.h"

namespace tj::data {
namespace {

using testing::PatternImage;

constexpr ImageShape kShape{8, 8, 3};

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Record(const std::string& data) { return FrameTfRecord(Bytes(data)); }

std::string ImageRecord(int seed, int64_t label, const std::string& image_key = "image/encoded",
                        const std::string& label_key = "image/class/label") {
  const std::string png = *EncodePng(PatternImage(kShape, seed), kShape);
  return Record(SerializeImageExample(Bytes(png), label, image_key, label_key));
}

// Protobuf pieces for hand-made Examples.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Field(int number, const std::string& bytes) {
  return Varint(static_cast<uint64_t>(number) << 3 | 2) + Varint(bytes.size()) + bytes;
}
std::string Example(const std::vector<std::pair<std::string, std::string>>& features) {
  std::string map;
  for (const auto& [key, feature] : features) map += Field(1, Field(1, key) + Field(2, feature));
  return Field(1, map);
}

TfRecordOptions Options() {
  TfRecordOptions o;
  o.shape = kShape;
  return o;
}

TEST(Crc32cTest, MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  // TensorFlow's masking of the CRC of an empty string (0): rotate, then add the delta.
  EXPECT_EQ(MaskCrc(0), 0xa282ead8u);
}

TEST(TfRecordDatasetTest, ReadsRecordsAcrossFilesWithBothKeyStyles) {
  tj::testing::TempDir dir("tj-tfrecord");
  dir.Write("train-00000-of-00002", ImageRecord(1, 3) + ImageRecord(2, 0));
  dir.Write("train-00001-of-00002", ImageRecord(3, 7, "image", "label"));
  auto files = ListTfRecordFiles(dir.path());
  ASSERT_TRUE(files.ok()) << files.status().message();
  ASSERT_EQ(files->size(), 2u);
  auto d = OpenTfRecordDataset(*files, Options());
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->size(), 3);
  EXPECT_EQ((*d)->classes(), 8);  // the largest label + 1
  EXPECT_EQ((*d)->Label(0), 3);
  EXPECT_EQ((*d)->Label(1), 0);
  EXPECT_EQ((*d)->Label(2), 7);
  std::vector<uint8_t> pixels(kShape.Size());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*d)->ReadImage(i, pixels).ok());
    EXPECT_EQ(pixels, PatternImage(kShape, i + 1));
  }
  EXPECT_EQ((*d)->digest().size(), 64u);
  TfRecordOptions ten = Options();
  ten.classes = 10;
  auto d10 = OpenTfRecordDataset(*files, ten);
  ASSERT_TRUE(d10.ok());
  EXPECT_EQ((*d10)->classes(), 10);
  EXPECT_NE((*d10)->digest(), (*d)->digest());
}

TEST(TfRecordDatasetTest, ReadsUnpackedLabelsUnknownFieldsAndTheFirstImagesSize) {
  const std::string png = *EncodePng(PatternImage(kShape, 1), kShape);
  const std::string image = Field(1, Field(1, png));               // Feature{bytes_list{value}}
  const std::string label = Field(3, Varint(1 << 3) + Varint(5));  // int64_list, unpacked
  const std::string extra = Field(2, Field(1, "ignored"));         // a float_list under another key
  std::string example = Example({{"other", extra}, {"image", image}, {"label", label}});
  example += Varint(7 << 3 | 0) + Varint(99);  // an unknown varint field of Example
  tj::testing::TempDir dir("tj-tfrecord");
  const std::string path = dir.Write("data.tfrecord", Record(example));
  TfRecordOptions o = Options();
  o.shape = {0, 0, 1};
  auto d = OpenTfRecordDataset({path}, o);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->Label(0), 5);
  EXPECT_EQ((*d)->shape(), (ImageShape{8, 8, 1}));
}

TEST(TfRecordDatasetTest, RefusesDamagedFramingNamingFileRecordAndOffset) {
  const std::string good = ImageRecord(1, 1);
  const std::string second = ImageRecord(2, 2);
  std::string bad_length_crc = good + second;
  bad_length_crc[good.size() + 9] ^= 1;
  std::string bad_data_crc = good + second;
  bad_data_crc[good.size() + 20] ^= 1;
  std::string huge_record;
  AppendLittleEndian<uint64_t>(huge_record, uint64_t{1} << 32);
  AppendLittleEndian<uint32_t>(huge_record, MaskCrc(Crc32c(huge_record.data(), 8)));
  struct Case {
    std::string name;
    std::string bytes;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"length crc", bad_length_crc,
       "record 1 at offset " + std::to_string(good.size()) +
           ": the CRC-32C of the length does not match"},
      {"data crc", bad_data_crc,
       "record 1 at offset " + std::to_string(good.size()) + ": the CRC-32C of the record's"},
      {"truncated header", good + second.substr(0, 5),
       "record 1 at offset " + std::to_string(good.size()) +
           ": truncated: 5 bytes left, a record header needs 12"},
      {"truncated data", good + second.substr(0, second.size() - 1),
       "record 1 at offset " + std::to_string(good.size()) + ": truncated"},
      {"over the limit", huge_record + std::string(16, '\0'),
       "record 0 at offset 0: length 4294967296 bytes, over the limit of 67108864"},
      {"gzip", std::string("\x1f\x8b\x08\x00", 4) + good, "is gzip-compressed"},
      {"empty", "", "no records"},
  };
  for (const Case& c : cases) {
    tj::testing::TempDir dir("tj-tfrecord-bad");
    const std::string path = dir.Write("f.tfrecord", c.bytes);
    auto r = OpenTfRecordDataset({path}, Options());
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << r.status().message();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << c.name;
  }
}

TEST(TfRecordDatasetTest, RefusesExamplesWithoutAReadableImageOrLabel) {
  const std::string png = *EncodePng(PatternImage(kShape, 1), kShape);
  const std::string image = Field(1, Field(1, png));
  const std::string label = Field(3, Field(1, Varint(2)));
  const std::string negative = Field(3, Field(1, Varint(static_cast<uint64_t>(-4))));
  const std::string float_label = Field(2, Field(1, std::string(4, '\0')));
  const std::string empty_bytes = Field(1, "");
  struct Case {
    std::string name;
    std::string record;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"no image", Example({{"label", label}, {"image/format", image}}),
       "without an image (feature 'image/encoded' or 'image'); its features: 'label', "
       "'image/format'"},
      {"no label", Example({{"image", image}}), "without a label"},
      {"label of floats", Example({{"image", image}, {"label", float_label}}),
       "feature 'label' is a float_list, not an int64_list"},
      {"image of ints", Example({{"image", label}, {"label", label}}),
       "feature 'image' is an int64_list, not a bytes_list"},
      {"no image value", Example({{"image", empty_bytes}, {"label", label}}),
       "feature 'image' holds no value"},
      {"negative label", Example({{"image", image}, {"label", negative}}), "label -4 is negative"},
      {"varint past the end", std::string("\x0a\x05\x0a\x03\x0a\x80", 6),
       "malformed tf.train.Example at byte"},
      {"length past the end", std::string("\x0a\x7f", 2), "a field of 127 bytes but 0 are left"},
      {"group", std::string("\x0b", 1), "(a group) is not supported"},
      {"field zero", std::string("\x02\x00", 2), "field number 0 is not valid"},
      {"eleven-byte varint", std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),
       "varint"},
      {"not an image", Example({{"image", Field(1, Field(1, "GIF89a"))}, {"label", label}}), ""},
  };
  for (const Case& c : cases) {
    tj::testing::TempDir dir("tj-tfrecord-bad");
    const std::string path = dir.Write("f.tfrecord", Record(c.record));
    auto r = OpenTfRecordDataset({path}, Options());
    if (c.expected.empty()) {  // opens; the image fails when read
      ASSERT_TRUE(r.ok()) << c.name << ": " << r.status().message();
      std::vector<uint8_t> pixels(kShape.Size());
      Status s = (*r)->ReadImage(0, pixels);
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.message().find(path + ": record 0 (image at offset"), std::string::npos)
          << s.message();
      EXPECT_NE(s.message().find("neither JPEG nor PNG"), std::string::npos) << s.message();
      continue;
    }
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << r.status().message();
    EXPECT_NE(r.status().message().find(path + ": record 0 at offset 0"), std::string::npos)
        << c.name << ": " << r.status().message();
  }
  TfRecordOptions five = Options();
  five.classes = 2;
  tj::testing::TempDir dir("tj-tfrecord-bad");
  auto r = OpenTfRecordDataset({dir.Write("f", ImageRecord(1, 2))}, five);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("label 2 is not a class 0..1"), std::string::npos);
}

TEST(TfRecordDatasetTest, ListsFilesOfADirectoryAndRefusesNone) {
  tj::testing::TempDir dir("tj-tfrecord");
  EXPECT_FALSE(ListTfRecordFiles(dir.path()).ok());
  EXPECT_FALSE(ListTfRecordFiles(dir / "missing").ok());
  dir.Write("b", "");
  dir.Write("a", "");
  dir.Write(".hidden", "");
  auto files = ListTfRecordFiles(dir.path());
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(*files, (std::vector<std::string>{dir / "a", dir / "b"}));
}

}  // namespace
}  // namespace tj::data
