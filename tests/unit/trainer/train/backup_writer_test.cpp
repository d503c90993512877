// The chief's background backup writer with a real full disk (a small tmpfs): a backup that
// runs out of space is a warning and the next save point tries again, never the end of the
// run.
#include "trainer/train/backup_writer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/support/temp_dir.h"

namespace tj::train {
namespace {

using checkpoint::BackupManager;
using checkpoint::TrainingState;
using tj::testing::ReadAll;
using tj::testing::SmallTmpfs;

TrainingState StateOf(int64_t epoch, size_t floats) {
  TrainingState s;
  s.fingerprint = {{"model", "cnn"}};
  s.epoch = epoch;
  s.tensors = {{"weights", std::vector<float>(floats, static_cast<float>(epoch))}};
  return s;
}

TEST(BackupWriter, OutOfSpaceIsRetriedAtTheNextSavePointNotAFailure) {
  SmallTmpfs disk(512 << 10);
  if (!disk.error().empty()) GTEST_SKIP() << disk.error();
  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  {
    EventLog log(LogFormat::kJson, out, err);
    Progress progress;
    BackupManager backups(disk.path(), &log, {"uid-1", 0});
    ASSERT_TRUE(backups.Claim().ok());
    BackupWriter writer(&backups, &log, &progress);
    ASSERT_TRUE(writer.Submit(StateOf(1, 1000), 1, 0).ok());
    // 4 MiB on a 512 KiB volume: ENOSPC in the writer's thread.
    ASSERT_TRUE(writer.Submit(StateOf(2, 1 << 20), 2, 0).ok());
    // The next save point: before, the previous write's ENOSPC came back here and training
    // ended with exit 1; now it is a warning, and this one is written.
    Status next = writer.Submit(StateOf(3, 1000), 3, 0);
    EXPECT_TRUE(next.ok()) << next.message();
    EXPECT_TRUE(writer.Wait().ok());
    EXPECT_EQ(writer.skipped(), 1);
    auto r = backups.Restore({{"model", "cnn"}});
    ASSERT_TRUE(r.ok() && r->has_value()) << r.status().message();
    EXPECT_EQ((*r)->epoch, 3);
    // Out of space at the very end (the last Wait) is a warning too.
    ASSERT_TRUE(writer.Submit(StateOf(4, 1 << 20), 4, 0).ok());
    EXPECT_TRUE(writer.Wait().ok());
    EXPECT_EQ(writer.skipped(), 2);
  }
  const std::string warnings = ReadAll(err);
  EXPECT_NE(warnings.find("No space left on device (disk full?); training goes on without this "
                          "backup and the next save point tries again"),
            std::string::npos)
      << warnings;
  std::fclose(out);
  std::fclose(err);
}

TEST(BackupWriter, OtherErrorsStillEndTheRun) {
  tj::testing::TempDir dir;
  tj::testing::WriteBytes(dir.Join("file"), "x");
  FILE* sink = std::tmpfile();
  EventLog log(LogFormat::kJson, sink, sink);
  Progress progress;
  BackupManager backups(dir.Join("file/backup"), &log);  // not a directory
  BackupWriter writer(&backups, &log, &progress);
  ASSERT_TRUE(writer.Submit(StateOf(1, 10), 1, 0).ok());
  EXPECT_FALSE(writer.Submit(StateOf(2, 10), 2, 0).ok());
  std::fclose(sink);
}

}  // namespace
}  // namespace tj::train
