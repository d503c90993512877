// SIGTERM, as a pod evicted, preempted or drained receives it, with the real binary: the
// replicas agree in the step's all-reduce to stop after the same step, the chief backs it
// up, every replica exits 75 (retryable), and the gang started again resumes from that exact
// step and ends with bitwise the weights of an uninterrupted run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/integration/trainer/trainer_harness.h"

namespace tj::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kWorkers = 3;

std::vector<std::string> Flags(const TempDir& dir, const std::string& tag) {
  return BackedUpRun(dir, tag, /*epochs=*/2, /*steps_per_epoch=*/30, /*save_freq=*/7,
                     {"--collective-timeout", "20"});
}

using Gang = std::vector<std::unique_ptr<Subprocess>>;

Gang StartGang(const TempDir& dir, const LoopbackTfCluster& c, const std::string& tag,
               const std::string& log) {
  Gang g;
  for (int i = 0; i < kWorkers; ++i) {
    g.push_back(
        StartTrainer(Flags(dir, tag), c.TfConfig("worker", i), dir / (log + std::to_string(i))));
  }
  return g;
}

TEST(StopOnSignalTest, SigtermOfOneWorkerStopsTheGangAtOneBackedUpStep) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  std::string expected;
  {
    Gang ref = StartGang(dir, LoopbackTfCluster::Make(kWorkers), "ref-", "ref");
    for (auto& p : ref) ASSERT_EQ(p->Wait(300s), 0) << p->Stderr();
    expected = Digest(*ref[0]);
    ASSERT_FALSE(expected.empty());
  }
  LoopbackTfCluster c = LoopbackTfCluster::Make(kWorkers);
  Gang first = StartGang(dir, c, "", "first");
  // Mid-epoch 1: after the backup of step 14, the last worker alone is asked to stop.
  ASSERT_TRUE(first[0]->WaitForLine(R"("event":"backup_saved","epoch":1,"step":14)", 300s))
      << first[0]->Stderr();
  first[kWorkers - 1]->Signal(SIGTERM);
  std::vector<nlohmann::json> stopped;
  for (auto& p : first) {
    auto code = p->Wait(30s);
    ASSERT_TRUE(code.has_value()) << "a replica did not exit within 30s of the SIGTERM";
    EXPECT_EQ(*code, 75) << p->Stderr();
    auto s = Events(*p, "stopped");
    ASSERT_EQ(s.size(), 1u) << p->Stdout();
    stopped.push_back(s[0]);
  }
  // Every replica stopped after the same step; only the signalled one was asked.
  for (const auto& s : stopped) {
    EXPECT_EQ(s["epoch"], stopped[0]["epoch"]);
    EXPECT_EQ(s["step"], stopped[0]["step"]);
  }
  EXPECT_FALSE(stopped[0]["requested_here"].get<bool>());
  EXPECT_TRUE(stopped[kWorkers - 1]["requested_here"].get<bool>());
  EXPECT_EQ(stopped[kWorkers - 1]["signal"], SIGTERM);
  const int epoch = stopped[0]["epoch"], step = stopped[0]["step"];
  EXPECT_GT(epoch * 100 + step, 1 * 100 + 14) << "stopped before the signal was sent";
  // The chief's last backup is of exactly that step.
  auto saved = Events(*first[0], "backup_saved");
  ASSERT_FALSE(saved.empty());
  EXPECT_EQ(saved.back()["epoch"], epoch);
  EXPECT_EQ(saved.back()["step"], step);

  Gang second = StartGang(dir, c, "", "second");
  for (auto& p : second) ASSERT_EQ(p->Wait(300s), 0) << p->Stderr();
  for (auto& p : second) {
    auto restored = Events(*p, "restored");
    ASSERT_EQ(restored.size(), 1u) << p->Stdout();
    EXPECT_EQ(restored[0]["epoch"], epoch);
    EXPECT_EQ(restored[0]["step"], step);
    EXPECT_EQ(Digest(*p), expected);
  }
}

// Before the step loop there is nothing to back up: a worker waiting for its peers exits 75
// at once instead of waiting out the rendezvous timeout.
TEST(StopOnSignalTest, SigtermBeforeTrainingExitsRetryableAtOnce) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  LoopbackTfCluster c = LoopbackTfCluster::Make(2);
  auto lonely = StartTrainer(Flags(dir, ""), c.TfConfig("worker", 1), dir / "lonely");
  std::this_thread::sleep_for(2s);  // loading the data set, then waiting for the chief
  ASSERT_TRUE(lonely->running()) << lonely->Stderr();
  lonely->Signal(SIGTERM);
  auto code = lonely->Wait(5s);
  ASSERT_TRUE(code.has_value()) << "still running 5s after SIGTERM";
  EXPECT_EQ(*code, 75);
  EXPECT_NE(lonely->Stderr().find("outside the step loop"), std::string::npos) << lonely->Stderr();
}

// A second SIGTERM does not wait: here the stop waits for a backup write held 10 s by a
// failpoint (common/failpoint.h), and the second signal ends the process at once.
TEST(StopOnSignalTest, SecondSigtermExitsAtOnce) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  std::vector<std::string> argv = {kTrainer, "--data-dir", kDataDir, "--device", "cpu"};
  for (const std::string& f : Flags(dir, "")) argv.push_back(f);
  Subprocess p(argv, {{"TJ_FAILPOINTS", "backup.before_rename=sleep:10000@2"}}, dir / "p");
  ASSERT_TRUE(p.WaitForLine(R"("event":"backup_saved","epoch":1,"step":7)", 120s)) << p.Stderr();
  p.Signal(SIGTERM);  // the stop now waits for the second backup, held 10 s
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(p.running()) << p.Stderr();
  const auto start = std::chrono::steady_clock::now();
  p.Signal(SIGTERM);
  auto code = p.Wait(5s);
  ASSERT_TRUE(code.has_value()) << "still running 5s after the second SIGTERM";
  EXPECT_EQ(*code, 128 + SIGTERM) << p.Stderr();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_NE(p.Stderr().find("again: exiting at once"), std::string::npos) << p.Stderr();
  EXPECT_TRUE(Events(p, "stopped").empty());
}

// In a container the trainer is PID 1 of its PID namespace, and the kernel drops a signal
// that PID 1 has no handler for, even the kubelet's SIGTERM from outside: without its own
// handling the trainer would ignore the eviction and die by SIGKILL at the end of the grace
// period. Reproduced with unshare(1) (root): the stop still happens.
TEST(StopOnSignalTest, SigtermReachesTheTrainerAsPid1OfAPidNamespace) {
  TJ_REQUIRE_DATASET();
  if (::geteuid() != 0 || std::system("/usr/bin/unshare --pid --fork true 2>/dev/null") != 0) {
    GTEST_SKIP() << "needs root and unshare(1) to start the trainer as PID 1 of a namespace";
  }
  TempDir dir;
  std::vector<std::string> argv = {"/usr/bin/unshare", "--pid",    "--fork",
                                   "--kill-child",     kTrainer,   "--data-dir",
                                   kDataDir,           "--device", "cpu"};
  for (const std::string& f : Flags(dir, "")) argv.push_back(f);
  Subprocess p(argv, {}, dir / "p");
  ASSERT_TRUE(p.WaitForLine(R"("event":"backup_saved","epoch":1,"step":7)", 120s)) << p.Stderr();
  // The trainer's pid as the host sees it: the child of unshare whose NSpid ends in 1.
  pid_t trainer = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream status(e.path() / "status");
    std::string line, ppid, nspid;
    while (std::getline(status, line)) {
      if (line.rfind("PPid:", 0) == 0) ppid = line.substr(5);
      if (line.rfind("NSpid:", 0) == 0) nspid = line.substr(6);
    }
    if (std::atoi(ppid.c_str()) == p.pid() && nspid.ends_with("\t1")) {
      trainer = std::atoi(e.path().filename().c_str());
    }
  }
  ASSERT_GT(trainer, 0) << "no PID-1 child of unshare found";
  ASSERT_EQ(::kill(trainer, SIGTERM), 0);
  auto code = p.Wait(30s);
  ASSERT_TRUE(code.has_value()) << "PID 1 ignored SIGTERM";
  EXPECT_EQ(*code, 75) << p.Stderr();
  EXPECT_EQ(Events(p, "stopped").size(), 1u) << p.Stdout();
}

// The evaluator has nothing to save either: it exits 75 at once (it resumes from the
// checkpoints when started again).
TEST(StopOnSignalTest, EvaluatorExitsAtOnceOnSigterm) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  LoopbackTfCluster c = LoopbackTfCluster::Make(1, false, /*with_evaluator=*/true);
  auto flags = Flags(dir, "");
  flags.insert(flags.end(), {"--eval-poll-interval", "0.2"});
  auto evaluator = StartTrainer(flags, c.TfConfig("evaluator", 0), dir / "eval");
  std::this_thread::sleep_for(2s);
  ASSERT_TRUE(evaluator->running()) << evaluator->Stderr();
  evaluator->Signal(SIGTERM);
  auto code = evaluator->Wait(5s);
  ASSERT_TRUE(code.has_value()) << "still running 5s after SIGTERM";
  EXPECT_EQ(*code, 75);
}

}  // namespace
}  // namespace tj::testing
