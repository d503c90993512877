#include "trainer/checkpoint/volume_file.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "tests/support/planted_file.h"
#include "tests/support/temp_dir.h"

namespace tj::checkpoint {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::PlantFifo;
using testing::ReturnsWithin;
using testing::TempDir;
using testing::WriteBytes;

TEST(ReadVolumeFile, ReadsARegularFileWholeAndMissingIsNothing) {
  TempDir dir;
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  WriteBytes(dir.Join("f"), bytes);
  auto r = ReadVolumeFile(dir.Join("f"), bytes.size());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, bytes);
  auto missing = ReadVolumeFile(dir.Join("nope"), 10);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
}

TEST(ReadVolumeFile, AFifoIsRefusedAtOnce) {
  TempDir dir;
  const std::string fifo = dir.Join("fifo");
  PlantFifo(fifo);
  StatusOr<std::optional<std::string>> r = Status::Error("not run");
  ASSERT_TRUE(ReturnsWithin(5s, {fifo}, [&] { r = ReadVolumeFile(fifo, 4096); }));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(fifo + ": a FIFO, not a regular file: not read"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("remove it"), std::string::npos);
}

TEST(ReadVolumeFile, ADirectoryALinkAndADeviceAreRefusedNamingWhatTheyAre) {
  TempDir dir;
  fs::create_directory(dir.Join("d"));
  WriteBytes(dir.Join("target"), "x");
  fs::create_symlink(dir.Join("target"), dir.Join("link"));
  fs::create_symlink("/dev/zero", dir.Join("to-device"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir.Join("d"), "a directory"},
      {dir.Join("link"), "a symbolic link"},
      {dir.Join("to-device"), "a symbolic link"},
      {"/dev/zero", "a character device"}};
  for (const auto& [path, kind] : cases) {
    auto r = ReadVolumeFile(path, 4096);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_NE(r.status().message().find(path + ": " + kind + ", not a regular file"),
              std::string::npos)
        << r.status().message();
  }
}

TEST(ReadVolumeFile, AFileOverTheBoundIsRefusedUnread) {
  TempDir dir;
  WriteBytes(dir.Join("big"), "");
  fs::resize_file(dir.Join("big"), uint64_t{1} << 32);  // sparse: 4 GiB, costs no disk
  auto r = ReadVolumeFile(dir.Join("big"), 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir.Join("big") + ": too large: 4294967296 bytes, more "
                                                        "than the 4096"),
            std::string::npos)
      << r.status().message();
  WriteBytes(dir.Join("edge"), std::string(4096, 'a'));
  auto edge = ReadVolumeFile(dir.Join("edge"), 4096);
  ASSERT_TRUE(edge.ok()) << edge.status().message();
  EXPECT_EQ((*edge)->size(), 4096u);
  EXPECT_FALSE(ReadVolumeFile(dir.Join("edge"), 4095).ok());
}

}  // namespace
}  // namespace tj::checkpoint
