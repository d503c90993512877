// BackupAndRestore with the real binary: a run killed at any point and started again ends
// with bitwise the weights of a run never interrupted; torn and corrupt backups fall back to
// the previous one; a backup of another configuration is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/integration/trainer/trainer_harness.h"
#include "tests/support/temp_dir.h"

namespace tj::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// `tag` prefixes the backup and checkpoint directories (a reference run uses its own).
std::vector<std::string> Flags(const TempDir& dir, const std::vector<std::string>& extra = {},
                               const std::string& tag = "") {
  return BackedUpRun(dir, tag, /*epochs=*/3, /*steps_per_epoch=*/40, /*save_freq=*/10, extra);
}

// Runs the job in dir/first and kills it (SIGKILL) once it has printed `line`.
void KillAfter(const TempDir& dir, const std::string& line) {
  auto first = StartTrainer(Flags(dir), "", dir / "first");
  ASSERT_TRUE(first->WaitForLine(line, 120s)) << first->Stderr();
  first->Signal(SIGKILL);
  first->Wait(10s);
}

std::string Uninterrupted(const TempDir& dir) {
  auto p = StartTrainer(Flags(dir, {}, "ref-"), "", dir / "ref");
  EXPECT_EQ(p->Wait(180s), 0) << p->Stderr();
  return Digest(*p);
}

std::vector<std::string> BackupFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("backup-", 0) == 0) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return std::stol(a.substr(a.rfind('-') + 1)) < std::stol(b.substr(b.rfind('-') + 1));
  });
  return files;
}

// Kills the run right after the backup of (epoch, step) is reported, then resumes it.
void KillAfterBackupAndResume(const std::string& line, int extra_delay_ms) {
  TempDir dir;
  const std::string expected = Uninterrupted(dir);
  auto first = StartTrainer(Flags(dir), "", dir / "first");
  ASSERT_TRUE(first->WaitForLine(line, 120s)) << first->Stdout() << first->Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(extra_delay_ms));
  first->Signal(SIGKILL);
  ASSERT_EQ(first->Wait(10s), 128 + SIGKILL);
  auto second = StartTrainer(Flags(dir), "", dir / "second");
  ASSERT_EQ(second->Wait(180s), 0) << second->Stderr();
  auto restored = Events(*second, "restored");
  ASSERT_EQ(restored.size(), 1u) << second->Stdout();
  EXPECT_NE(restored[0]["path"].get<std::string>().find(dir / "backup"), std::string::npos);
  EXPECT_EQ(Digest(*second), expected);
  // The backup is deleted after success; the checkpoints and the final marker remain.
  EXPECT_TRUE(BackupFiles(dir / "backup").empty());
  EXPECT_TRUE(fs::exists(dir / "ckpt/ckpt-3"));
  EXPECT_TRUE(fs::exists(dir / "ckpt/ckpt-final"));
}

TEST(ResumeTest, KilledMidEpochResumesBitwise) {
  TJ_REQUIRE_DATASET();
  KillAfterBackupAndResume(R"("event":"backup_saved","epoch":2,"step":20)", 30);
}

TEST(ResumeTest, KilledRightAfterAnEpochBoundaryResumesBitwise) {
  TJ_REQUIRE_DATASET();
  KillAfterBackupAndResume(R"("event":"backup_saved","epoch":1,"step":40)", 0);
}

TEST(ResumeTest, KilledInTheFirstEpochResumesBitwise) {
  TJ_REQUIRE_DATASET();
  KillAfterBackupAndResume(R"("event":"backup_saved","epoch":1,"step":10)", 5);
}

// A kill during a backup write leaves either a temporary file (the rename never happened)
// or, on a file system without atomic rename, a torn newest backup. Both are simulated here
// on a real run's backups: the run resumes from the previous backup, with a warning, and
// still ends with the uninterrupted weights.
TEST(ResumeTest, TornNewestBackupFallsBackToThePreviousOne) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  const std::string expected = Uninterrupted(dir);
  ASSERT_NO_FATAL_FAILURE(KillAfter(dir, R"("epoch":2,"step":30)"));
  auto files = BackupFiles(dir / "backup");
  ASSERT_GE(files.size(), 2u);
  fs::resize_file(files.back(), fs::file_size(files.back()) / 2);    // torn
  WriteBytes(dir / "backup/.backup-99.tmp.abc123", "half a write");  // debris
  auto second = StartTrainer(Flags(dir), "", dir / "second");
  ASSERT_EQ(second->Wait(180s), 0) << second->Stderr();
  EXPECT_NE(second->Stderr().find(files.back()), std::string::npos) << second->Stderr();
  EXPECT_EQ(Events(*second, "restored").size(), 1u);
  EXPECT_EQ(Digest(*second), expected);
}

TEST(ResumeTest, NoValidBackupIsAnErrorNotAFreshStart) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(KillAfter(dir, R"("epoch":1,"step":30)"));
  for (const std::string& f : BackupFiles(dir / "backup")) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(100);
    io.put('\x5a');  // one flipped byte each: digest mismatch
  }
  auto second = StartTrainer(Flags(dir), "", dir / "second");
  auto code = second->Wait(60s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1);
  EXPECT_NE(second->Stderr().find("digest"), std::string::npos) << second->Stderr();
  EXPECT_TRUE(Events(*second, "epoch_end").empty());
}

TEST(ResumeTest, BackupOfAnotherConfigurationIsRefused) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(KillAfter(dir, R"("epoch":1,"step":20)"));
  auto second = StartTrainer(Flags(dir, {"--batch-size", "32"}), "", dir / "second");
  auto code = second->Wait(60s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1);
  EXPECT_NE(second->Stderr().find("batch_size: backup has 64, this run has 32"), std::string::npos)
      << second->Stderr();
}

// The "Done when" of BackupAndRestore: two workers and an evaluator, backups every
// `save_freq` steps; worker 1 SIGKILLed during epoch 2; worker 0 exits 75; both started again
// resume from the last backup and end with the weights of an uninterrupted two-worker run;
// the evaluator reports the final checkpoint and exits 0.
void SurviveAKilledWorker(int steps_per_epoch, int save_freq, const std::string& kill_after) {
  TempDir dir;
  auto flags = [&](const std::string& tag) {
    return BackedUpRun(dir, tag, /*epochs=*/3, steps_per_epoch, save_freq,
                       {"--collective-timeout", "10"});
  };
  std::string expected;
  {
    LoopbackTfCluster c = LoopbackTfCluster::Make(2);
    auto r0 = StartTrainer(flags("ref-"), c.TfConfig("worker", 0), dir / "r0");
    auto r1 = StartTrainer(flags("ref-"), c.TfConfig("worker", 1), dir / "r1");
    ASSERT_EQ(r0->Wait(300s), 0) << r0->Stderr();
    ASSERT_EQ(r1->Wait(300s), 0) << r1->Stderr();
    expected = Digest(*r0);
    ASSERT_EQ(Digest(*r1), expected);
  }
  LoopbackTfCluster c = LoopbackTfCluster::Make(2, false, /*with_evaluator=*/true);
  auto eval_flags = flags("");
  eval_flags.insert(eval_flags.end(), {"--eval-poll-interval", "0.2"});
  auto evaluator = StartTrainer(eval_flags, c.TfConfig("evaluator", 0), dir / "eval");
  auto w0 = StartTrainer(flags(""), c.TfConfig("worker", 0), dir / "w0");
  auto w1 = StartTrainer(flags(""), c.TfConfig("worker", 1), dir / "w1");
  ASSERT_TRUE(w0->WaitForLine(kill_after, 300s)) << w0->Stderr();
  std::this_thread::sleep_for(20ms);
  w1->Signal(SIGKILL);
  auto code = w0->Wait(15s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 75) << w0->Stderr();
  auto w0b = StartTrainer(flags(""), c.TfConfig("worker", 0), dir / "w0b");
  auto w1b = StartTrainer(flags(""), c.TfConfig("worker", 1), dir / "w1b");
  ASSERT_EQ(w0b->Wait(300s), 0) << w0b->Stderr();
  ASSERT_EQ(w1b->Wait(300s), 0) << w1b->Stderr();
  ASSERT_EQ(Events(*w0b, "restored").size(), 1u);
  ASSERT_EQ(Events(*w1b, "restored").size(), 1u);
  EXPECT_EQ(Events(*w0b, "restored")[0]["epoch"], 2);
  EXPECT_EQ(Digest(*w0b), expected);
  EXPECT_EQ(Digest(*w1b), expected);
  ASSERT_EQ(evaluator->Wait(60s), 0) << evaluator->Stderr();
  auto evals = Events(*evaluator, "evaluation");
  ASSERT_FALSE(evals.empty());
  EXPECT_EQ(evals.back()["checkpoint"], "ckpt-3");
  EXPECT_EQ(evals.back()["epoch"], 3);
}

TEST(ResumeTest, TwoWorkersAndAnEvaluatorSurviveAKilledWorker) {
  TJ_REQUIRE_DATASET();
  SurviveAKilledWorker(40, 10, R"("backup_saved","epoch":2,"step":10)");
}

// The same at full size, as a user runs it: whole epochs (468 steps of 2 x 64 images),
// backups every 100 optimizer steps (counted across epochs, as Keras counts them: in epoch 2
// at steps 32, 132, 232, ...), the kill after the backup at step 132 of epoch 2.
TEST(ResumeTest, FullEpochsTwoWorkersAndAnEvaluatorSurviveAKilledWorker) {
  TJ_REQUIRE_DATASET();
  SurviveAKilledWorker(0, 100, R"("backup_saved","epoch":2,"step":132)");
}

// Two gangs of one job on one backup directory: gang 0's chief still runs (a partitioned node)
// when gang 1's chief starts. Gang 1 claims the backups, resumes from gang 0's and ends with
// the uninterrupted weights; gang 0's next backup is refused and it stops.
TEST(ResumeTest, AStaleChiefOfAnOlderGangCannotWriteTheNewGangsBackups) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  const std::string expected = Uninterrupted(dir);
  auto gang = [](int n) {
    return std::map<std::string, std::string>{{"TJ_JOB_UID", "uid-7"},
                                              {"TJ_RESTART_COUNT", std::to_string(n)}};
  };
  // Gang 0's backups are slowed (1 s before each rename), so it is still running later.
  auto env0 = gang(0);
  env0["TJ_FAILPOINTS"] = "backup.before_rename=sleep:1000";
  auto stale = StartTrainer(Flags(dir), "", dir / "stale", kTestKey, env0);
  ASSERT_TRUE(stale->WaitForLine("\"backup_saved\"", 120s)) << stale->Stderr();
  auto fresh = StartTrainer(Flags(dir, {"--keep-backup"}), "", dir / "fresh", kTestKey, gang(1));
  ASSERT_EQ(fresh->Wait(180s), 0) << fresh->Stderr();
  auto restored = Events(*fresh, "restored");
  ASSERT_EQ(restored.size(), 1u) << fresh->Stdout();
  EXPECT_NE(restored[0]["path"].get<std::string>().find(dir / "backup/job-uid-7/backup-"),
            std::string::npos);
  EXPECT_EQ(Digest(*fresh), expected);
  auto code = stale->Wait(180s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1) << stale->Stderr();
  EXPECT_NE(stale->Stderr().find("belong to gang 1 of this job; this process is of gang 0, an "
                                 "older one"),
            std::string::npos)
      << stale->Stderr();
  EXPECT_TRUE(Events(*stale, "train_end").empty());
}

}  // namespace
}  // namespace tj::testing
