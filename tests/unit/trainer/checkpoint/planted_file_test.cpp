// Files planted on the shared volume where a trainer reads (a FIFO, a directory, a link, an
// oversized file, garbage, an unsigned final marker): each costs at most what
// docs/reliability.md says ("The shared volume is a trust boundary"), never a hang.
#include "tests/support/planted_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "tests/support/captured_log.h"
#include "tests/support/temp_dir.h"
#include "trainer/checkpoint/backup_manager.h"
#include "trainer/checkpoint/checkpoint_manager.h"
#include "trainer/checkpoint/checkpoint_watcher.h"

namespace tj::checkpoint {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::CapturedLog;
using testing::PlantFifo;
using testing::ReturnsWithin;
using testing::TempDir;
using testing::WriteBytes;

constexpr char kKey[] = "the job's key";
constexpr char kUid[] = "0b7e4f1c-uid";
// A reader that does not wait on a FIFO returns in microseconds; a loaded machine gets 5 s.
constexpr auto kDeadline = 5s;

const nlohmann::json kFingerprint = {{"model", "cnn"}, {"batch_size", 64}};

TrainingState StateAt(int64_t epoch) {
  TrainingState s;
  s.fingerprint = kFingerprint;
  s.epoch = epoch;
  s.tensors = {{"weights", std::vector<float>(16, static_cast<float>(epoch))}};
  return s;
}

cluster::GangIdentity Gang(int64_t gang) { return cluster::GangIdentity{kUid, gang, kKey}; }

std::string JobDir(const TempDir& dir) { return dir.Join(std::string("job-") + kUid); }

// ---- Backups and the fence.

TEST(PlantedFile, AFifoAsTheNewestBackupIsSkippedNotWaitedOn) {
  TempDir dir;
  CapturedLog log;
  BackupManager m(dir.path(), log.log(), Gang(0));
  ASSERT_TRUE(m.Claim().ok());
  ASSERT_TRUE(m.Save(StateAt(1)).ok());
  ASSERT_TRUE(m.Save(StateAt(2)).ok());
  const std::string fifo = JobDir(dir) + "/backup-3";
  PlantFifo(fifo);
  StatusOr<std::optional<TrainingState>> r = Status::Error("not run");
  std::string path;
  ASSERT_TRUE(ReturnsWithin(kDeadline, {fifo}, [&] { r = m.Restore(kFingerprint, &path); }))
      << "Restore waited on the FIFO " << fifo;
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->epoch, 2);
  EXPECT_EQ(path, JobDir(dir) + "/backup-2");
  const std::string err = log.Stderr();
  EXPECT_NE(err.find(fifo + ": a FIFO, not a regular file"), std::string::npos) << err;
  EXPECT_NE(err.find("remove it"), std::string::npos) << err;
}

TEST(PlantedFile, AFifoAsTheFenceIsAnErrorNamingItNotAHang) {
  TempDir dir;
  BackupManager first(dir.path(), nullptr, Gang(0));
  ASSERT_TRUE(first.Claim().ok());
  ASSERT_TRUE(first.Save(StateAt(1)).ok());
  const std::string fence = JobDir(dir) + "/fence";
  fs::remove(fence);
  PlantFifo(fence);
  // Mid-run (the chief's next Save), and before a restore (the next gang's Claim and Restore).
  Status saved, claimed;
  StatusOr<std::optional<TrainingState>> restored = Status::Error("not run");
  BackupManager next(dir.path(), nullptr, Gang(1));
  ASSERT_TRUE(ReturnsWithin(kDeadline, {fence},
                            [&] {
                              saved = first.Save(StateAt(2));
                              claimed = next.Claim();
                              restored = next.Restore(kFingerprint);
                            }))
      << "the fence's reader waited on the FIFO " << fence;
  for (const Status& s : {saved, claimed, restored.status()}) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("reading backup fence"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(fence + ": a FIFO, not a regular file"), std::string::npos)
        << s.message();
  }
}

TEST(PlantedFile, ADirectoryALinkAndAHugeFileAsBackupsAreSkipped) {
  TempDir dir;
  CapturedLog log;
  BackupManager m(dir.path(), log.log(), Gang(0));
  ASSERT_TRUE(m.Claim().ok());
  ASSERT_TRUE(m.Save(StateAt(1)).ok());
  const std::string job = JobDir(dir);
  fs::create_directory(job + "/backup-2");
  fs::create_symlink(job + "/backup-1", job + "/backup-3");  // the job's own, behind a link
  WriteBytes(job + "/backup-4", "");
  fs::resize_file(job + "/backup-4", uint64_t{1} << 30);  // sparse: 1 GiB, costs no disk
  auto r = m.Restore(kFingerprint);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->epoch, 1);
  const std::string err = log.Stderr();
  EXPECT_NE(err.find(job + "/backup-2: a directory, not a regular file"), std::string::npos) << err;
  EXPECT_NE(err.find(job + "/backup-3: a symbolic link, not a regular file"), std::string::npos)
      << err;
  EXPECT_NE(err.find(job + "/backup-4: too large: 1073741824 bytes"), std::string::npos) << err;
}

// What may lie where a fresh job's first backup would be: none of it was written by the job,
// so none of it may fail the job.
std::vector<std::pair<std::string, std::function<void(const std::string&)>>> Plants() {
  return {
      {"garbage", [](const std::string& p) { WriteBytes(p, "hello, this is not a backup\n"); }},
      {"a state file's preamble and a bad digest",
       [](const std::string& p) {
         std::string b = *EncodeState(StateAt(9), kKey);
         b[b.size() - 40] ^= 0x01;
         WriteBytes(p, b);
       }},
      {"a FIFO", [](const std::string& p) { PlantFifo(p); }},
      {"a directory", [](const std::string& p) { fs::create_directory(p); }},
  };
}

TEST(PlantedFile, AnythingWhereAFreshJobsFirstBackupWouldBeIsSkippedAndTheJobTrains) {
  for (const auto& [what, plant] : Plants()) {
    SCOPED_TRACE(what);
    for (int64_t gang : {0, 2}) {  // gang 2: the job restarted before any backup was written
      TempDir dir;
      fs::create_directories(JobDir(dir));
      const std::string planted = JobDir(dir) + "/backup-1";
      plant(planted);
      CapturedLog log;
      BackupManager m(dir.path(), log.log(), Gang(gang));
      StatusOr<std::optional<TrainingState>> r = Status::Error("not run");
      ASSERT_TRUE(ReturnsWithin(kDeadline, {planted}, [&] {
        ASSERT_TRUE(m.Claim().ok());
        r = m.Restore(kFingerprint);
      }));
      ASSERT_TRUE(r.ok()) << "gang " << gang << ": " << r.status().message();
      EXPECT_FALSE(r->has_value()) << "a fresh start";
      const std::string err = log.Stderr();
      EXPECT_NE(err.find("no backup in " + JobDir(dir) + " is this job's"), std::string::npos)
          << err;
      EXPECT_NE(err.find(planted), std::string::npos) << err;
      EXPECT_NE(err.find("Starting afresh"), std::string::npos) << err;
      // It trains: its own backups follow the planted file and are the ones restored.
      ASSERT_TRUE(m.Save(StateAt(1)).ok());
      std::string path;
      r = m.Restore(kFingerprint, &path);
      ASSERT_TRUE(r.ok()) << r.status().message();
      ASSERT_TRUE(r->has_value());
      EXPECT_EQ((*r)->epoch, 1);
      EXPECT_EQ(path, JobDir(dir) + "/backup-2");
    }
  }
}

TEST(PlantedFile, TheJobsOwnBackupsAllUnreadableStillRefuseAFreshStart) {
  TempDir dir;
  BackupManager first(dir.path(), nullptr, Gang(0));
  ASSERT_TRUE(first.Claim().ok());
  ASSERT_TRUE(first.Save(StateAt(1)).ok());
  ASSERT_TRUE(first.Save(StateAt(2)).ok());
  BackupManager next(dir.path(), nullptr, Gang(1));
  ASSERT_TRUE(next.Claim().ok());  // finds backup-2, the job's own
  for (const char* name : {"/backup-1", "/backup-2"}) WriteBytes(JobDir(dir) + name, "rot");
  auto r = next.Restore(kFingerprint);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Refusing to start from scratch"), std::string::npos)
      << r.status().message();
}

// ---- The evaluator's checkpoints and final marker.

struct Evaluated {
  std::vector<int64_t> epochs;
  CheckpointWatcher::EvaluateFn Fn() {
    return [this](const TrainingState& s, const std::string&) {
      epochs.push_back(s.epoch);
      return Status::Ok();
    };
  }
};

CheckpointWatcherOptions WithKey(std::string key = kKey) {
  CheckpointWatcherOptions o;
  o.max_read_attempts = 2;
  o.key = std::move(key);
  return o;
}

TEST(PlantedFile, AFifoAsTheFinalMarkerOrACheckpointDoesNotHangTheEvaluator) {
  TempDir dir;
  CheckpointManager writer(dir.path(), 10, kKey);
  ASSERT_TRUE(writer.Save(StateAt(1)).ok());
  const std::string marker = dir.Join("ckpt-final");
  const std::string checkpoint = dir.Join("ckpt-2");
  PlantFifo(marker);
  PlantFifo(checkpoint);
  FakeClock clock;
  CapturedLog log;
  CheckpointWatcher watcher(dir.path(), &clock, log.log(), WithKey());
  Evaluated evaluated;
  std::vector<StatusOr<WatchDecision>> decisions;
  ASSERT_TRUE(ReturnsWithin(kDeadline, {marker, checkpoint}, [&] {
    for (int i = 0; i < 3; ++i) decisions.push_back(watcher.PollOnce(evaluated.Fn()));
  })) << "the evaluator waited on a FIFO";
  for (const auto& d : decisions) ASSERT_TRUE(d.ok()) << d.status().message();
  // ckpt-2 is tried twice and given up on; ckpt-1 is older, so nothing is left to evaluate.
  EXPECT_TRUE(evaluated.epochs.empty());
  EXPECT_EQ(decisions.back()->kind, WatchDecision::Kind::kWait);
  const std::string err = log.Stderr();
  EXPECT_NE(err.find(marker + ": a FIFO, not a regular file"), std::string::npos) << err;
  EXPECT_NE(err.find("treating it as absent"), std::string::npos) << err;
  EXPECT_NE(err.find(checkpoint + ": a FIFO, not a regular file"), std::string::npos) << err;
  EXPECT_NE(err.find("giving up on it"), std::string::npos) << err;
}

TEST(PlantedFile, AFinalMarkerNotSignedWithTheJobsKeyDoesNotStopTheEvaluator) {
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> markers = {
      {"unsigned, as markers were",
       [](const std::string& dir) {
         WriteBytes(dir + "/ckpt-final", R"({"final_epoch":1,"checkpoint":"ckpt-1"})");
       }},
      {"signed with another key",
       [](const std::string& dir) {
         ASSERT_TRUE(CheckpointManager(dir, 10, "another key").WriteFinalMarker(1).ok());
       }},
      {"nested deep", [](const std::string& dir) {
         WriteBytes(dir + "/ckpt-final", std::string(3000, '[') + std::string(3000, ']'));
       }}};
  for (const auto& [what, plant] : markers) {
    SCOPED_TRACE(what);
    TempDir dir;
    CheckpointManager writer(dir.path(), 10, kKey);
    for (int64_t e : {1, 2}) ASSERT_TRUE(writer.Save(StateAt(e)).ok());
    plant(dir.path());
    FakeClock clock;
    CapturedLog log;
    CheckpointWatcher watcher(dir.path(), &clock, log.log(), WithKey());
    Evaluated evaluated;
    auto first = watcher.PollOnce(evaluated.Fn());
    auto second = watcher.PollOnce(evaluated.Fn());
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ(evaluated.epochs, (std::vector<int64_t>{2}));
    EXPECT_EQ(second->kind, WatchDecision::Kind::kWait) << "the planted marker was believed";
    EXPECT_NE(log.Stderr().find(dir.Join("ckpt-final")), std::string::npos) << log.Stderr();
    // The job's own marker ends the watch.
    ASSERT_TRUE(writer.WriteFinalMarker(2).ok());
    auto third = watcher.PollOnce(evaluated.Fn());
    ASSERT_TRUE(third.ok());
    EXPECT_EQ(third->kind, WatchDecision::Kind::kDone);
  }
}

}  // namespace
}  // namespace tj::checkpoint
