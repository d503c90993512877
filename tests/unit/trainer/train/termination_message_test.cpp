// The chief's termination message (trainer/train/termination_message.h): the backup it ended
// with, written only into a file the kubelet made, never created, never waited on.
#include "trainer/train/termination_message.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "tests/support/temp_dir.h"

namespace tj::train {
namespace {

using nlohmann::json;
using tj::testing::ReadBytes;
using tj::testing::TempDir;

TEST(TerminationMessage, NamesTheBackupTheChiefEndedWith) {
  TempDir dir;
  const std::string path = dir.Write("termination-log", "");  // as the kubelet mounts it
  const json backup = {{"epoch", 3},
                       {"step", 236},
                       {"time", "2026-01-01T00:00:09.500Z"},
                       {"path", "/data/backup/job-1/backup-7"}};
  ASSERT_TRUE(WriteTerminationMessage(backup, path).ok());
  EXPECT_EQ(
      json::parse(ReadBytes(path)),
      (json{{"lastBackup", {{"epoch", 3}, {"step", 236}, {"time", "2026-01-01T00:00:09.500Z"}}}}));
}

TEST(TerminationMessage, NothingOutsideAPodOrWithoutABackup) {
  TempDir dir;
  const std::string missing = dir.path() + "/termination-log";
  ASSERT_TRUE(WriteTerminationMessage(json{{"epoch", 1}, {"step", 2}}, missing).ok());
  EXPECT_FALSE(std::filesystem::exists(missing)) << "created a file outside a pod";
  const std::string there = dir.Write("there", "old");
  ASSERT_TRUE(WriteTerminationMessage(std::nullopt, there).ok());
  EXPECT_EQ(ReadBytes(there), "old");
}

// A FIFO where the message goes (no reader): the write neither blocks nor fails the trainer.
TEST(TerminationMessage, AFifoThereIsNotWaitedOn) {
  TempDir dir;
  const std::string fifo = dir.path() + "/termination-log";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(WriteTerminationMessage(json{{"epoch", 1}, {"step", 2}}, fifo).ok());
}

TEST(TerminationMessage, TheKubeletsPathUnlessTheEnvironmentNamesOne) {
  ::unsetenv("TJ_TERMINATION_MESSAGE_PATH");
  EXPECT_EQ(TerminationMessagePath(), "/dev/termination-log");
  ::setenv("TJ_TERMINATION_MESSAGE_PATH", "/tmp/x", 1);
  EXPECT_EQ(TerminationMessagePath(), "/tmp/x");
  ::unsetenv("TJ_TERMINATION_MESSAGE_PATH");
}

}  // namespace
}  // namespace tj::train
