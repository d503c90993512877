// Files planted on the shared backup volume, against the real tj-trainer of a one-worker job
// (TJ_JOB_UID, TJ_RESTART_COUNT as the operator sets them): a FIFO or garbage where a fresh
// job's first backup would be must not stop it, and a FIFO planted as the fence in the middle
// of a run ends it with an error naming the fence, not a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "tests/integration/trainer/trainer_harness.h"
#include "tests/support/temp_dir.h"

namespace tj::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr char kUid[] = "5f0c2a1e-planted";

std::map<std::string, std::string> JobEnv() {
  return {{"TJ_JOB_UID", kUid}, {"TJ_RESTART_COUNT", "0"}};
}

std::string JobBackupDir(const TempDir& dir) {
  return (dir / "backup") + std::string("/job-") + kUid;
}

// Opens `fifo` for writing and closes it, which ends a reader's wait on it: a trainer that
// waits on it then fails the test at its deadline instead of hanging past it.
void Release(const std::string& fifo) {
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) ::close(fd);
}

TEST(PlantedVolumeTest, AFifoOrGarbageWhereAFreshJobsFirstBackupWouldBeIsSkippedAndItTrains) {
  TJ_REQUIRE_DATASET();
  for (const std::string what : {"a FIFO", "garbage"}) {
    SCOPED_TRACE(what);
    TempDir dir;
    fs::create_directories(JobBackupDir(dir));
    const std::string planted = JobBackupDir(dir) + "/backup-1";
    if (what == "a FIFO") {
      ASSERT_EQ(::mkfifo(planted.c_str(), 0644), 0);
    } else {
      WriteBytes(planted, "not a backup at all\n");
    }
    auto p = StartTrainer(BackedUpRun(dir, "", /*epochs=*/1, /*steps_per_epoch=*/20,
                                      /*save_freq=*/10),
                          "", dir / "run", kTestKey, JobEnv());
    std::optional<int> rc = p->Wait(120s);
    if (!rc) {
      if (what == "a FIFO") Release(planted);
      FAIL() << "the trainer did not finish in 120 s:\n" << p->Stderr();
    }
    EXPECT_EQ(*rc, 0) << p->Stderr();
    const std::string err = p->Stderr();
    EXPECT_NE(err.find("no backup in " + JobBackupDir(dir) + " is this job's"), std::string::npos)
        << err;
    EXPECT_NE(err.find(planted), std::string::npos) << err;
    EXPECT_FALSE(Digest(*p).empty()) << p->Stdout();
  }
}

TEST(PlantedVolumeTest, AFifoPlantedAsTheFenceMidRunIsAnErrorNamingItNotAHang) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  auto p = StartTrainer(BackedUpRun(dir, "", /*epochs=*/3, /*steps_per_epoch=*/200,
                                    /*save_freq=*/10),
                        "", dir / "run", kTestKey, JobEnv());
  ASSERT_TRUE(p->WaitForLine(R"("event":"backup_saved")", 120s)) << p->Stderr();
  const std::string fence = JobBackupDir(dir) + "/fence";
  const std::string aside = fence + ".aside";
  ASSERT_EQ(::mkfifo(aside.c_str(), 0644), 0);
  fs::rename(aside, fence);  // in place at once, as a planting writer would
  std::optional<int> rc = p->Wait(60s);
  if (!rc) {
    Release(fence);
    FAIL() << "the chief did not stop within 60 s of the FIFO:\n" << p->Stderr();
  }
  EXPECT_NE(*rc, 0);
  const std::string err = p->Stderr();
  EXPECT_NE(err.find("reading backup fence: " + fence + ": a FIFO, not a regular file"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace tj::testing
