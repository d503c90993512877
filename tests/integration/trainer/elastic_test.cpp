// Elastic mode with the real binary on Fashion-MNIST (--elastic-shards, TJ_ELASTIC_SHARDS): a
// job of 2 shards trains bitwise the same at 1 and 2 workers; stopped at 2 workers mid-epoch
// (SIGTERM, as an eviction), resumed at 1 worker, stopped again and resumed at 2, it ends
// with the weights and the epoch figures of the uninterrupted run; what cannot resume exactly
// is refused, saying why and what to do.
#include <gtest/gtest.h>

#include <thread>

#include "tests/integration/trainer/trainer_harness.h"

namespace tj::testing {
namespace {

using namespace std::chrono_literals;

// 2 epochs of 6 steps; with 2 shards of 64 a global batch of 128 at every worker count.
std::vector<std::string> Flags(const TempDir& dir, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> f = {"--epochs",    "2", "--steps-per-epoch", "6",
                                "--threads",   "1", "--backup-dir",      dir / "backup",
                                "--save-freq", "4"};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

// The epoch figures that do not depend on timing.
std::vector<nlohmann::json> EpochFigures(const Subprocess& p) {
  std::vector<nlohmann::json> out;
  for (const auto& e : Events(p, "epoch_end")) {
    out.push_back({{"epoch", e["epoch"]}, {"loss", e["loss"]}, {"accuracy", e["accuracy"]}});
  }
  return out;
}

// A job of `workers` processes (one without TF_CONFIG when `workers` is 1), started now.
struct Job {
  std::vector<std::unique_ptr<Subprocess>> processes;

  static Job Start(int workers, const std::vector<std::string>& flags, const TempDir& dir,
                   const std::string& log, const std::map<std::string, std::string>& env = {},
                   int env_rank = -1) {
    Job j;
    LoopbackTfCluster c = LoopbackTfCluster::Make(workers);
    for (int i = 0; i < workers; ++i) {
      const std::string tf_config = workers == 1 ? "" : c.TfConfig("worker", i);
      j.processes.push_back(StartTrainer(flags, tf_config, dir / (log + std::to_string(i)),
                                         kTestKey, i == env_rank ? env : EnvWithout(env)));
    }
    return j;
  }
  // `env` with every variable unset but TJ_ELASTIC_SHARDS (the failpoints are one process's).
  static std::map<std::string, std::string> EnvWithout(std::map<std::string, std::string> env) {
    for (auto& [name, value] : env) {
      if (name != "TJ_ELASTIC_SHARDS") value.clear();
    }
    return env;
  }
};

// Waits until `p` pauses at its failpoint, then asks it to stop (SIGTERM): the step it is in
// is the last, on every replica.
void StopAtFailpoint(Subprocess& p) {
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (p.Stderr().find("failpoint train.step") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no failpoint: " << p.Stderr();
    ASSERT_TRUE(p.running()) << p.Stderr();
    std::this_thread::sleep_for(20ms);
  }
  p.Signal(SIGTERM);
}

// Every process of `job` stops with 75 after (epoch, step), which the chief backed up.
void ExpectStoppedAt(Job& job, int epoch, int step) {
  for (auto& p : job.processes) {
    auto code = p->Wait(60s);
    ASSERT_TRUE(code.has_value()) << p->Stderr();
    EXPECT_EQ(*code, 75) << p->Stderr();
    auto stopped = Events(*p, "stopped");
    ASSERT_EQ(stopped.size(), 1u) << p->Stdout();
    EXPECT_EQ(stopped[0]["epoch"], epoch);
    EXPECT_EQ(stopped[0]["step"], step);
  }
  auto saved = Events(*job.processes[0], "backup_saved");
  ASSERT_FALSE(saved.empty());
  EXPECT_EQ(saved.back()["epoch"], epoch);
  EXPECT_EQ(saved.back()["step"], step);
}

// (a) The same job at 1 and at 2 workers: bitwise the same weights and epoch figures. A run
// of one worker with the whole global batch in one batch sums in another order: its weights
// differ, so the equality is not a matter of course.
TEST(ElasticTest, TwoShardsTrainBitwiseTheSameAtOneAndTwoWorkers) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  Job two = Job::Start(2, Flags(dir, {"--elastic-shards", "2"}), dir, "two");
  for (auto& p : two.processes) ASSERT_EQ(p->Wait(120s), 0) << p->Stderr();
  // The operator's way of asking for it: the environment.
  Job one = Job::Start(1, {"--epochs", "2", "--steps-per-epoch", "6", "--threads", "1"}, dir, "one",
                       {{"TJ_ELASTIC_SHARDS", "2"}});
  ASSERT_EQ(one.processes[0]->Wait(120s), 0) << one.processes[0]->Stderr();
  const std::string digest = Digest(*two.processes[0]);
  ASSERT_EQ(digest.size(), 64u);
  EXPECT_EQ(Digest(*two.processes[1]), digest);
  EXPECT_EQ(Digest(*one.processes[0]), digest);
  EXPECT_EQ(EpochFigures(*one.processes[0]), EpochFigures(*two.processes[0]));
  auto elastic = Events(*one.processes[0], "elastic");
  ASSERT_EQ(elastic.size(), 1u);
  EXPECT_EQ(elastic[0]["shards_per_worker"], 2);
  EXPECT_EQ(elastic[0]["global_batch"], 128);

  Job whole = Job::Start(
      1, {"--epochs", "2", "--steps-per-epoch", "6", "--threads", "1", "--batch-size", "128"}, dir,
      "whole");
  ASSERT_EQ(whole.processes[0]->Wait(120s), 0) << whole.processes[0]->Stderr();
  EXPECT_NE(Digest(*whole.processes[0]), digest);
}

// (b) The Done-when of elastic training: minReplicas 1, maxReplicas 2. Stopped at 2 workers in
// epoch 1, resumed at 1 (only one can run) and stopped in epoch 2, resumed at 2 again: the
// uninterrupted run's weights and epoch figures, and no image skipped or repeated (each leg
// resumes at the step the last one backed up).
TEST(ElasticTest, ShrinkingToOneWorkerAndGrowingBackEndsBitwiseAsTheUninterruptedRun) {
  TJ_REQUIRE_DATASET();
  TempDir reference_dir, dir;
  const std::vector<std::string> elastic = {"--elastic-shards", "2"};
  Job reference = Job::Start(1, Flags(reference_dir, elastic), reference_dir, "ref");
  ASSERT_EQ(reference.processes[0]->Wait(120s), 0) << reference.processes[0]->Stderr();
  const std::string expected = Digest(*reference.processes[0]);
  ASSERT_EQ(expected.size(), 64u);
  const auto figures = EpochFigures(*reference.processes[0]);
  ASSERT_EQ(figures.size(), 2u);

  // 2 workers; worker 1 pauses in its 3rd step and is sent SIGTERM there: both stop after
  // step 3 of epoch 1, between the backups of every 4 steps.
  Job first = Job::Start(2, Flags(dir, elastic), dir, "first",
                         {{"TJ_FAILPOINTS", "train.step=sleep:1500@3"}}, /*env_rank=*/1);
  ASSERT_NO_FATAL_FAILURE(StopAtFailpoint(*first.processes[1]));
  ASSERT_NO_FATAL_FAILURE(ExpectStoppedAt(first, 1, 3));

  // 1 worker resumes at step 3 of epoch 1 and is stopped in its 5th step: step 2 of epoch 2.
  Job second = Job::Start(1, Flags(dir, elastic), dir, "second",
                          {{"TJ_FAILPOINTS", "train.step=sleep:1500@5"}}, /*env_rank=*/0);
  ASSERT_NO_FATAL_FAILURE(StopAtFailpoint(*second.processes[0]));
  ASSERT_NO_FATAL_FAILURE(ExpectStoppedAt(second, 2, 2));
  auto restored = Events(*second.processes[0], "restored");
  ASSERT_EQ(restored.size(), 1u);
  EXPECT_EQ(restored[0]["epoch"], 1);
  EXPECT_EQ(restored[0]["step"], 3);
  EXPECT_EQ(restored[0]["backup_workers"], 2);
  EXPECT_EQ(restored[0]["workers"], 1);
  // Epoch 1 ended at 1 worker with the figures of the uninterrupted run.
  ASSERT_EQ(EpochFigures(*second.processes[0]).size(), 1u);
  EXPECT_EQ(EpochFigures(*second.processes[0])[0], figures[0]);

  // 2 workers again, to the end.
  Job third = Job::Start(2, Flags(dir, elastic), dir, "third");
  for (auto& p : third.processes) {
    ASSERT_EQ(p->Wait(120s), 0) << p->Stderr();
    EXPECT_EQ(Digest(*p), expected);
    auto r = Events(*p, "restored");
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0]["epoch"], 2);
    EXPECT_EQ(r[0]["step"], 2);
    EXPECT_EQ(r[0]["backup_workers"], 1);
    ASSERT_EQ(EpochFigures(*p).size(), 1u);
    EXPECT_EQ(EpochFigures(*p)[0], figures[1]);
  }
}

// (c) What would not resume exactly is refused: without elastic mode, another worker count;
// another shard count; a worker count that does not divide the shards; a summation that
// elastic mode cannot keep the same (bfloat16 on the wire).
TEST(ElasticTest, WhatCannotResumeExactlyIsRefusedSayingWhatToDo) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  Job first = Job::Start(2, Flags(dir), dir, "first",
                         {{"TJ_FAILPOINTS", "train.step=sleep:1500@2"}}, /*env_rank=*/1);
  ASSERT_NO_FATAL_FAILURE(StopAtFailpoint(*first.processes[1]));
  ASSERT_NO_FATAL_FAILURE(ExpectStoppedAt(first, 1, 2));

  Job one = Job::Start(1, Flags(dir), dir, "one");
  ASSERT_EQ(one.processes[0]->Wait(60s), 1);
  const std::string e1 = one.processes[0]->Stderr();
  EXPECT_NE(e1.find("was written by 2 workers without elastic mode (global batch 128) and this "
                    "run has 1 worker without elastic mode (global batch 64)"),
            std::string::npos)
      << e1;
  EXPECT_NE(e1.find("Run 2 workers, or resume in elastic mode with --elastic-shards 2"),
            std::string::npos)
      << e1;
  EXPECT_TRUE(Events(*one.processes[0], "epoch_end").empty());

  Job four = Job::Start(1, Flags(dir, {"--elastic-shards", "4"}), dir, "four");
  ASSERT_EQ(four.processes[0]->Wait(60s), 1);
  EXPECT_NE(four.processes[0]->Stderr().find("Resume with --elastic-shards 2"), std::string::npos)
      << four.processes[0]->Stderr();

  Job odd = Job::Start(2, Flags(dir, {"--elastic-shards", "3"}), dir, "odd");
  for (auto& p : odd.processes) {
    ASSERT_EQ(p->Wait(60s), 1);
    EXPECT_NE(p->Stderr().find("3 elastic shards cannot be split among 2 workers"),
              std::string::npos)
        << p->Stderr();
  }

  Job bf16 = Job::Start(1, Flags(dir, {"--elastic-shards", "2", "--allreduce-dtype", "bfloat16"}),
                        dir, "bf16");
  ASSERT_EQ(bf16.processes[0]->Wait(60s), 2);
  EXPECT_NE(bf16.processes[0]->Stderr().find("elastic mode (--elastic-shards 2) sums in float32"),
            std::string::npos)
      << bf16.processes[0]->Stderr();
}

}  // namespace
}  // namespace tj::testing
