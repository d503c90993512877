// SIGTERM, as a pod evicted, preempted or drained receives it, with the real binary: the
// replicas agree in the step's all-reduce to stop after the same step, the chief backs it
// up, every replica exits 75 (retryable), and the gang started again resumes from that exact
// step and ends with bitwise the weights of an uninterrupted run.
#include <gtest/gtest.h>

#include "tests/integration/trainer/trainer_harness.h"

namespace tj::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kWorkers = 3;

std::vector<std::string> Flags(const TempDir& dir, const std::string& tag) {
  return {"--epochs",
          "2",
          "--steps-per-epoch",
          "30",
          "--threads",
          "1",
          "--save-freq",
          "7",
          "--backup-dir",
          dir / (tag + "backup"),
          "--checkpoint-dir",
          dir / (tag + "ckpt"),
          "--collective-timeout",
          "20"};
}

using Gang = std::vector<std::unique_ptr<Subprocess>>;

Gang StartGang(const TempDir& dir, const LocalCluster& c, const std::string& tag,
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
    Gang ref = StartGang(dir, LocalCluster::Make(kWorkers), "ref-", "ref");
    for (auto& p : ref) ASSERT_EQ(p->Wait(300s), 0) << p->Stderr();
    expected = Digest(*ref[0]);
    ASSERT_FALSE(expected.empty());
  }
  LocalCluster c = LocalCluster::Make(kWorkers);
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
  LocalCluster c = LocalCluster::Make(2);
  auto lonely = StartTrainer(Flags(dir, ""), c.TfConfig("worker", 1), dir / "lonely");
  std::this_thread::sleep_for(2s);  // loading the data set, then waiting for the chief
  ASSERT_TRUE(lonely->running()) << lonely->Stderr();
  lonely->Signal(SIGTERM);
  auto code = lonely->Wait(5s);
  ASSERT_TRUE(code.has_value()) << "still running 5s after SIGTERM";
  EXPECT_EQ(*code, 75);
  EXPECT_NE(lonely->Stderr().find("outside the step loop"), std::string::npos) << lonely->Stderr();
}

// The evaluator has nothing to save either: it exits 75 at once (it resumes from the
// checkpoints when started again).
TEST(StopOnSignalTest, EvaluatorExitsAtOnceOnSigterm) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  LocalCluster c = LocalCluster::Make(1, false, /*with_evaluator=*/true);
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
