#include "trainer/observe/tensorboard_writer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "tests/support/temp_dir.h"
#include "trainer/observe/crc32c.h"

namespace tj::observe {
namespace {

namespace fs = std::filesystem;

using tj::testing::ReadBytes;
using tj::testing::TempDir;

TEST(Crc32cTest, MatchesTheStandardCheckValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
}

TEST(TensorBoardTest, FramingMatchesTfRecord) {
  const std::string data = "abc";
  const std::string r = FrameRecord(data);
  ASSERT_EQ(r.size(), 8 + 4 + 3 + 4u);
  EXPECT_EQ(static_cast<uint8_t>(r[0]), 3);
  for (int i = 1; i < 8; ++i) EXPECT_EQ(r[i], 0);
  uint32_t len_crc, data_crc;
  std::memcpy(&len_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 15, 4);
  EXPECT_EQ(len_crc, MaskCrc(Crc32c(r.data(), 8)));
  EXPECT_EQ(data_crc, MaskCrc(Crc32c("abc", 3)));
}

TEST(TensorBoardTest, EventEncodingMatchesTheProtobufWireFormat) {
  // Event{wall_time: 1.0, step: 300, summary{value{tag:"loss", simple_value: 0.5}}}, bytes as
  // protoc would produce them.
  const std::string expected =
      std::string("\x09\x00\x00\x00\x00\x00\x00\xf0\x3f", 9) +  // field 1, fixed64 1.0
      std::string("\x10\xac\x02", 3) +                          // field 2, varint 300
      std::string("\x2a\x0d", 2) +                              // field 5, 13 bytes
      std::string("\x0a\x0b", 2) +                              // Summary.value, 11 bytes
      std::string("\x0a\x04loss", 6) +                          // Value.tag
      std::string("\x15\x00\x00\x00\x3f", 5);                   // Value.simple_value 0.5f
  EXPECT_EQ(EncodeScalarEvent(1.0, 300, "loss", 0.5f), expected);
  const std::string version = EncodeFileVersionEvent(2.0);
  EXPECT_EQ(version.substr(9), std::string("\x1a\x0d") + "brain.Event:2");
}

TEST(TensorBoardTest, WrittenScalarsReadBackWithEveryCrcChecked) {
  TempDir dir;
  double now = 1700000000.25;
  auto writer = ScalarWriter::Open(dir.path() + "/train", [&] { return now; });
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  const std::string path = (*writer)->path();
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.1700000000.", 0), 0u)
      << path;
  for (int epoch = 1; epoch <= 3; ++epoch) {
    now += 10;
    ASSERT_TRUE((*writer)->WriteScalar("loss", epoch, 1.0f / static_cast<float>(epoch)).ok());
    ASSERT_TRUE((*writer)->WriteScalar("accuracy", epoch, 0.8f + 0.01f * epoch).ok());
  }
  ASSERT_TRUE((*writer)->WriteScalar("negative_step", -5, -2.5f).ok());
  ASSERT_TRUE((*writer)->Flush().ok());

  auto files = ListEventFiles(dir.path() + "/train");
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(*files, std::vector<std::string>{path});
  auto events = ReadEventFile(path);
  ASSERT_TRUE(events.ok()) << events.status().message();
  ASSERT_EQ(events->size(), 8u);
  EXPECT_EQ((*events)[0].file_version, "brain.Event:2");
  EXPECT_EQ((*events)[0].wall_time, 1700000000.25);
  EXPECT_TRUE((*events)[0].scalars.empty());
  for (int epoch = 1; epoch <= 3; ++epoch) {
    const auto& loss = (*events)[2 * epoch - 1];
    const auto& acc = (*events)[2 * epoch];
    EXPECT_EQ(loss.step, epoch);
    EXPECT_EQ(loss.wall_time, 1700000000.25 + 10 * epoch);
    ASSERT_EQ(loss.scalars.size(), 1u);
    EXPECT_EQ(loss.scalars[0].tag, "loss");
    EXPECT_EQ(loss.scalars[0].value, 1.0f / static_cast<float>(epoch));
    ASSERT_EQ(acc.scalars.size(), 1u);
    EXPECT_EQ(acc.scalars[0].tag, "accuracy");
    EXPECT_EQ(acc.scalars[0].value, 0.8f + 0.01f * epoch);
    EXPECT_TRUE(loss.file_version.empty());
  }
  EXPECT_EQ((*events)[7].step, -5);
  EXPECT_EQ((*events)[7].scalars[0].value, -2.5f);
}

TEST(TensorBoardTest, AFlippedByteAnywhereIsDetected) {
  TempDir dir;
  std::string path;
  {
    auto writer = ScalarWriter::Open(dir.path(), [] { return 1.0; });
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->WriteScalar("loss", 1, 0.25f).ok());
    ASSERT_TRUE((*writer)->WriteScalar("loss", 2, 0.125f).ok());
    path = (*writer)->path();
  }  // closed, flushed
  const std::string bytes = ReadBytes(path);
  ASSERT_TRUE(ParseEventRecords(bytes, path).ok());
  for (size_t pos = 0; pos < bytes.size(); ++pos) {
    std::string c = bytes;
    c[pos] ^= 0x04;
    auto r = ParseEventRecords(c, "f");
    ASSERT_FALSE(r.ok()) << "flip at byte " << pos << " went undetected";
    const std::string m = r.status().message();
    EXPECT_TRUE(m.find("CRC mismatch") != std::string::npos ||
                m.find("truncated") != std::string::npos)
        << m;
  }
  // A flip in the second record's data is reported with its index and offset.
  const size_t first = 8 + 4 + (bytes[0] & 0xff) + 4;
  const size_t second = first + 8 + 4 + (bytes[first] & 0xff) + 4;
  std::string c = bytes;
  c[second + 14] ^= 1;
  auto r = ParseEventRecords(c, "f");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "f: record 2 at byte " + std::to_string(second) + ": data CRC mismatch (corrupt file)");
}

TEST(TensorBoardTest, TruncatedFileIsReported) {
  TempDir dir;
  auto writer = ScalarWriter::Open(dir.path(), [] { return 1.0; });
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->WriteScalar("loss", 1, 0.25f).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  const std::string bytes = ReadBytes((*writer)->path());
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    auto r = ParseEventRecords(bytes.substr(0, cut), "f");
    // Cutting exactly between records leaves a valid, shorter file.
    if (r.ok()) continue;
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos)
        << "cut " << cut << ": " << r.status().message();
  }
}

TEST(TensorBoardTest, TwoWritersInTheSameSecondGetDistinctFiles) {
  TempDir dir;
  auto a = ScalarWriter::Open(dir.path(), [] { return 5.0; });
  auto b = ScalarWriter::Open(dir.path(), [] { return 5.0; });
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  EXPECT_EQ(ListEventFiles(dir.path())->size(), 2u);
}

TEST(TensorBoardTest, UnwritableDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  dir.Write("file", "x");
  auto w = ScalarWriter::Open(dir.path() + "/file/train");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(dir.path() + "/file/train"), std::string::npos);
}

TEST(TensorBoardTest, UnknownFieldsAreSkipped) {
  // A Value with metadata (field 9) and a Summary with an unknown varint field, as TF2 may
  // write; the scalar must still come out.
  std::string value = std::string("\x0a\x01x", 3) + std::string("\x4a\x02\x08\x01", 4) +
                      std::string("\x15\x00\x00\x80\x3f", 5);
  std::string summary = std::string("\x0a") + static_cast<char>(value.size()) + value + "\x10\x07";
  std::string event = std::string("\x10\x05", 2) + "\x2a" + static_cast<char>(summary.size()) +
                      summary + std::string("\x30\x01", 2);
  auto r = ParseEventRecords(FrameRecord(event), "f");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ((*r)[0].scalars.size(), 1u);
  EXPECT_EQ((*r)[0].scalars[0].tag, "x");
  EXPECT_EQ((*r)[0].scalars[0].value, 1.0f);
  EXPECT_EQ((*r)[0].step, 5);
}

}  // namespace
}  // namespace tj::observe
