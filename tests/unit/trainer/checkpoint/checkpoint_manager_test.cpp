#include "trainer/checkpoint/checkpoint_manager.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/temp_dir.h"

namespace tj::checkpoint {
namespace {

using testing::TempDir;
using testing::WriteBytes;

TrainingState Epoch(int64_t e) {
  TrainingState s;
  s.fingerprint = {{"model", "cnn"}};
  s.epoch = e;
  s.tensors = {{"weights", {static_cast<float>(e)}}};
  return s;
}

std::vector<int64_t> Epochs(const std::string& dir) {
  std::vector<int64_t> out;
  auto list = ListCheckpoints(dir);
  for (const auto& e : *list) out.push_back(e.epoch);
  return out;
}

TEST(CheckpointManagerTest, SavesCkptPerEpochAndKeepsTheLastK) {
  TempDir dir;
  CheckpointManager m(dir.Join("ckpt"), 3);
  for (int e = 1; e <= 12; ++e) {
    auto path = m.Save(Epoch(e));
    ASSERT_TRUE(path.ok()) << path.status().message();
    EXPECT_EQ(*path, dir.Join("ckpt/ckpt-" + std::to_string(e)));
  }
  EXPECT_EQ(Epochs(m.dir()), (std::vector<int64_t>{10, 11, 12}));
  auto s = ReadStateFile(dir.Join("ckpt/ckpt-11"), "");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, Epoch(11));
}

TEST(CheckpointManagerTest, DefaultKeepsFiveAndZeroKeepsAll) {
  TempDir dir;
  CheckpointManager five(dir.Join("a"));
  CheckpointManager all(dir.Join("b"), 0);
  for (int e = 1; e <= 7; ++e) {
    ASSERT_TRUE(five.Save(Epoch(e)).ok());
    ASSERT_TRUE(all.Save(Epoch(e)).ok());
  }
  EXPECT_EQ(Epochs(five.dir()), (std::vector<int64_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(Epochs(all.dir()).size(), 7u);
}

TEST(CheckpointManagerTest, FinalMarkerNamesTheFinalEpoch) {
  TempDir dir;
  CheckpointManager m(dir.path(), 2);
  auto none = ReadFinalMarker(dir.path(), "");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, std::nullopt);
  ASSERT_TRUE(m.Save(Epoch(3)).ok());
  ASSERT_TRUE(m.WriteFinalMarker(3).ok());
  auto marker = ReadFinalMarker(dir.path(), "");
  ASSERT_TRUE(marker.ok()) << marker.status().message();
  EXPECT_EQ(*marker, 3);
  auto j = nlohmann::json::parse(testing::ReadBytes(dir.Join("ckpt-final")));
  EXPECT_EQ(j["checkpoint"], "ckpt-3");
  // The marker is not a checkpoint.
  EXPECT_EQ(Epochs(dir.path()), (std::vector<int64_t>{3}));
  ASSERT_TRUE(m.ClearFinalMarker().ok());
  EXPECT_EQ(*ReadFinalMarker(dir.path(), ""), std::nullopt);
  ASSERT_TRUE(m.ClearFinalMarker().ok());
}

TEST(CheckpointManagerTest, MalformedFinalMarkerIsAnErrorNamingTheFile) {
  TempDir dir;
  WriteBytes(dir.Join("ckpt-final"), "{\"final_ep");
  auto r = ReadFinalMarker(dir.path(), "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir.Join("ckpt-final")), std::string::npos);
}

TEST(CheckpointManagerTest, ListingIgnoresTempFilesAndOtherNamesAndSortsNumerically) {
  TempDir dir;
  for (const char* n : {"ckpt-10", "ckpt-9", "ckpt-2", ".ckpt-11.tmp.aaaaaa", "ckpt-final",
                        "ckpt-x", "notes.txt"}) {
    WriteBytes(dir.Join(n), "x");
  }
  auto list = ListCheckpoints(dir.path());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].name, "ckpt-2");
  EXPECT_EQ((*list)[1].name, "ckpt-9");
  EXPECT_EQ((*list)[2].path, dir.Join("ckpt-10"));
  EXPECT_TRUE(ListCheckpoints(dir.Join("absent"))->empty());
}

TEST(CheckpointManagerTest, SaveCleansLeftoverTempFiles) {
  TempDir dir;
  WriteBytes(dir.Join(".ckpt-1.tmp.aaaaaa"), "half");
  CheckpointManager m(dir.path());
  ASSERT_TRUE(m.Save(Epoch(1)).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.Join(".ckpt-1.tmp.aaaaaa")));
}

TEST(CheckpointManagerTest, NamesRoundTrip) {
  EXPECT_EQ(CheckpointName(4), "ckpt-4");
  EXPECT_EQ(ParseCheckpointName("ckpt-4"), 4);
  EXPECT_EQ(ParseCheckpointName("ckpt-final"), std::nullopt);
  EXPECT_EQ(ParseCheckpointName("ckpt-"), std::nullopt);
  EXPECT_EQ(ParseCheckpointName("ckpt-4.tmp"), std::nullopt);
}

}  // namespace
}  // namespace tj::checkpoint
