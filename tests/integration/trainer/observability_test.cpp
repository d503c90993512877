// What a running tj-trainer shows besides stdout: TensorBoard event files (read back with
// every record's CRCs checked) and the status endpoint (GET /status, GET /metrics).
#include <gtest/gtest.h>

#include <map>

#include "tests/integration/trainer/trainer_harness.h"
#include "tests/support/http_fetch.h"
#include "trainer/observe/tensorboard_writer.h"

namespace tj::testing {
namespace {

using namespace std::chrono_literals;

// The body of GET path, or "" when nothing answers.
std::string HttpGet(int port, const std::string& path) { return Fetch(port, "GET", path).body; }

TEST(ObservabilityTest, TensorBoardFilesOfTrainerAndEvaluatorReadBack) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  const std::vector<std::string> flags = {
      "--epochs",         "2",          "--steps-per-epoch", "20",
      "--checkpoint-dir", dir / "ckpt", "--log-dir",         dir / "logs"};
  auto train = StartTrainer(flags, "", dir / "train");
  ASSERT_EQ(train->Wait(120s), 0) << train->Stderr();
  auto eval_flags = flags;
  eval_flags.insert(eval_flags.end(), {"--role", "evaluator", "--eval-poll-interval", "0.1"});
  auto eval = StartTrainer(eval_flags, "", dir / "eval");
  ASSERT_EQ(eval->Wait(120s), 0) << eval->Stderr();

  for (std::string sub : {"train", "eval"}) {
    auto files = observe::ListEventFiles(dir / ("logs/" + sub));
    ASSERT_TRUE(files.ok()) << files.status().message();
    ASSERT_EQ(files->size(), 1u) << sub;
    auto events = observe::ReadEventFile(files->at(0));  // checks both CRCs of every record
    ASSERT_TRUE(events.ok()) << events.status().message();
    std::map<std::string, std::vector<std::pair<int64_t, float>>> by_tag;
    for (const auto& e : *events)
      for (const auto& s : e.scalars) by_tag[s.tag].push_back({e.step, s.value});
    // The evaluator starts after training ended: it skips ckpt-1 and evaluates ckpt-2 only.
    const size_t expected = sub == "train" ? 2u : 1u;
    EXPECT_EQ(by_tag["epoch_loss"].size(), expected) << sub;
    EXPECT_EQ(by_tag["epoch_accuracy"].size(), expected) << sub;
    if (sub == "train") {
      EXPECT_EQ(by_tag["learning_rate"].size(), 2u);
      EXPECT_EQ(by_tag["images_per_sec"].size(), 2u);
      auto ends = Events(*train, "epoch_end");
      EXPECT_NEAR(by_tag["epoch_loss"][1].second, ends[1]["loss"].get<double>(), 1e-6);
      EXPECT_EQ(by_tag["epoch_loss"][1].first, 2);
    } else {
      auto evals = Events(*eval, "evaluation");
      ASSERT_EQ(evals.size(), 1u);
      EXPECT_EQ(evals[0]["checkpoint"], "ckpt-2");
      EXPECT_EQ(by_tag["epoch_accuracy"].back().first, 2);
      EXPECT_NEAR(by_tag["epoch_accuracy"].back().second, evals.back()["accuracy"].get<double>(),
                  1e-6);
    }
  }
}

TEST(ObservabilityTest, StatusEndpointWhileTraining) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  const int port = FreePort();
  auto p = StartTrainer({"--epochs", "200", "--steps-per-epoch", "20", "--threads", "1",
                         "--status-port", std::to_string(port)},
                        "", dir / "p");
  ASSERT_TRUE(p->WaitForLine(R"("epoch":2,)", 120s)) << p->Stderr();
  auto status = nlohmann::json::parse(HttpGet(port, "/status"), nullptr, false);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(status["role"], "chief");
  EXPECT_EQ(status["state"], "training");
  EXPECT_EQ(status["total_epochs"], 200);
  EXPECT_GE(status["epoch"].get<int>(), 2);
  EXPECT_TRUE(status["loss"].is_number());
  ASSERT_TRUE(status["cpu_target"].is_string());
  const std::string target = status["cpu_target"];
  EXPECT_FALSE(target.empty());
  const std::string metrics = HttpGet(port, "/metrics");
  EXPECT_NE(metrics.find("# TYPE tj_trainer_epoch gauge"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tj_trainer_loss{role=\"chief\"}"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("cpu_target=\"" + target + "\""), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tj_trainer_build_info{"), std::string::npos) << metrics;
  p->Signal(SIGTERM);
  EXPECT_TRUE(p->Wait(10s).has_value());
}

// The operator passes the status port only through the environment (TJ_STATUS_PORT), so a
// program's command line stays as its author wrote it; a bad value is a usage error (exit 2).
TEST(ObservabilityTest, StatusPortFromEnvironment) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  const int port = FreePort();
  Subprocess p({kTrainer, "--data-dir", kDataDir, "--device", "cpu", "--epochs", "200",
                "--steps-per-epoch", "20", "--threads", "1"},
               {{"TJ_STATUS_PORT", std::to_string(port)}}, dir / "p");
  ASSERT_TRUE(p.WaitForLine(R"("epoch":1,)", 120s)) << p.Stderr();
  auto status = nlohmann::json::parse(HttpGet(port, "/status"), nullptr, false);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(status["state"], "training");
  p.Signal(SIGTERM);
  EXPECT_TRUE(p.Wait(10s).has_value());

  Subprocess bad({kTrainer, "--data-dir", kDataDir, "--epochs", "1"}, {{"TJ_STATUS_PORT", "http"}},
                 dir / "bad");
  auto code = bad.Wait(30s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 2);
  EXPECT_NE(bad.Stderr().find("TJ_STATUS_PORT=http"), std::string::npos) << bad.Stderr();
}

// TJ_CPU_TARGET forces the kernels' SIMD target, which the start line names; a name the
// trainer does not know is a usage error that lists the names.
TEST(ObservabilityTest, CpuTargetFromEnvironment) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  Subprocess forced({kTrainer, "--data-dir", kDataDir, "--device", "cpu", "--epochs", "1",
                     "--steps-per-epoch", "2", "--threads", "1"},
                    {{"TJ_CPU_TARGET", "scalar"}}, dir / "forced");
  ASSERT_EQ(forced.Wait(120s), 0) << forced.Stderr();
  EXPECT_NE(forced.Stdout().find(R"("event":"start")"), std::string::npos) << forced.Stdout();
  EXPECT_NE(forced.Stdout().find(R"("cpu_target":"scalar")"), std::string::npos) << forced.Stdout();
  EXPECT_NE(forced.Stdout().find(R"x("device":"cpu (1 threads, scalar)")x"), std::string::npos)
      << forced.Stdout();

  Subprocess bad({kTrainer, "--data-dir", kDataDir, "--epochs", "1"},
                 {{"TJ_CPU_TARGET", "avx9000"}}, dir / "bad");
  auto code = bad.Wait(30s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 2);
  const std::string all = bad.Stdout() + bad.Stderr();
  EXPECT_NE(all.find("TJ_CPU_TARGET=avx9000: unknown CPU target"), std::string::npos) << all;
  EXPECT_NE(all.find("sse4"), std::string::npos) << all;
}

}  // namespace
}  // namespace tj::testing
