// tj-trainer as one process: events, determinism, and clear errors for bad input.
#include <gtest/gtest.h>

#include "tests/integration/trainer/trainer_harness.h"

namespace tj::testing {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kShort = {"--epochs", "2", "--steps-per-epoch", "25"};

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(SingleProcessTest, EventsAndBitwiseDeterminism) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  auto a = StartTrainer(With(kShort, {"--threads", "2"}), "", dir / "a");
  ASSERT_EQ(a->Wait(120s), 0) << a->Stderr();
  auto b = StartTrainer(With(kShort, {"--threads", "2"}), "", dir / "b");
  ASSERT_EQ(b->Wait(120s), 0) << b->Stderr();
  // The kernels sum in an order independent of the thread count: one thread, same bits.
  auto c = StartTrainer(With(kShort, {"--threads", "1"}), "", dir / "c");
  ASSERT_EQ(c->Wait(120s), 0) << c->Stderr();
  auto other_seed = StartTrainer(With(kShort, {"--seed", "7"}), "", dir / "d");
  ASSERT_EQ(other_seed->Wait(120s), 0) << other_seed->Stderr();

  EXPECT_EQ(Digest(*a).size(), 64u);
  EXPECT_EQ(Digest(*a), Digest(*b));
  EXPECT_EQ(Digest(*a), Digest(*c));
  EXPECT_NE(Digest(*a), Digest(*other_seed));

  auto epochs = Events(*a, "epoch_end");
  ASSERT_EQ(epochs.size(), 2u);
  const std::vector<std::string> keys = {"event",    "epoch", "steps",   "loss",
                                         "accuracy", "lr",    "seconds", "images_per_sec"};
  // The first line is the start line (the version, the CPU target), then the first step
  // (the time to first step the operator reports), then the epochs.
  const std::vector<std::string> lines = a->StdoutLines();
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind(R"({"event":"start",)", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind(R"({"event":"first_step",)", 0), 0u) << lines[1];
  const std::string& first = lines[2];
  size_t pos = 0;
  for (const std::string& k : keys) {  // fields in the documented order
    size_t at = first.find("\"" + k + "\":", pos);
    ASSERT_NE(at, std::string::npos) << k << " missing or out of order in " << first;
    pos = at;
  }
  EXPECT_EQ(epochs[0]["steps"], 25);
  EXPECT_EQ(epochs[1]["lr"], 1e-3);
  EXPECT_LT(epochs[1]["loss"].get<double>(), epochs[0]["loss"].get<double>());
  auto end = Events(*a, "train_end").at(0);
  EXPECT_GT(end["test_accuracy"].get<double>(), 0.5);
  EXPECT_EQ(end["epochs"], 2);
}

TEST(SingleProcessTest, TextLogFormat) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  auto p = StartTrainer({"--epochs", "1", "--steps-per-epoch", "3", "--log-format", "text"}, "",
                        dir / "p");
  ASSERT_EQ(p->Wait(60s), 0) << p->Stderr();
  EXPECT_EQ(p->StdoutLines().at(0).rfind("start version=", 0), 0u) << p->StdoutLines().at(0);
  EXPECT_EQ(p->StdoutLines().at(1).rfind("first_step epoch=1 step=1 global_step=1", 0), 0u)
      << p->StdoutLines().at(1);
  EXPECT_EQ(p->StdoutLines().at(2).rfind("epoch_end epoch=1 steps=3 loss=", 0), 0u)
      << p->StdoutLines().at(2);
}

struct BadRun {
  std::vector<std::string> flags;
  std::string tf_config;
  int exit_code;
  std::string message;
};

TEST(SingleProcessTest, BadInputGetsAClearErrorAndExitCode) {
  TempDir dir;
  const std::vector<BadRun> cases = {
      {{"--data-dir", dir / "nowhere"}, "", 1, "does not exist: pass --data-dir"},
      {{"--device", "gpu"}, "", 2, "--device gpu"},
      {{"--epochs", "0"}, "", 2, "--epochs"},
      {{"--save-freq", "often"}, "", 2, "--save-freq often"},
      {{"--evaluate-only"}, "", 2, "--evaluate-only needs --model"},
      {{}, "{not json", 2, "TF_CONFIG"},
      {{},
       R"({"cluster":{"worker":["localhost:1"]},"task":{"type":"worker","index":3}})",
       2,
       "index"},
      {{"--evaluate-only", "--model", dir / "nomodel"}, "", 1, "architecture.json not found"},
  };
  int i = 0;
  for (const BadRun& c : cases) {
    std::vector<std::string> argv = {kTrainer};
    if (c.flags.empty() || c.flags[0] != "--data-dir") {
      argv.push_back("--data-dir");
      argv.push_back(kDataDir);
    }
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    Subprocess p(argv, {{"TF_CONFIG", c.tf_config}}, dir / ("bad" + std::to_string(i++)));
    auto code = p.Wait(60s);
    ASSERT_TRUE(code.has_value()) << "hung: " << c.message;
    EXPECT_EQ(*code, c.exit_code) << c.message << "\n" << p.Stderr();
    EXPECT_NE((p.Stderr() + p.Stdout()).find(c.message), std::string::npos)
        << "expected \"" << c.message << "\" in:\n"
        << p.Stderr();
  }
}

TEST(SingleProcessTest, ExportAndEvaluateOnly) {
  TJ_REQUIRE_DATASET();
  TempDir dir;
  auto p = StartTrainer({"--epochs", "1", "--steps-per-epoch", "20", "--export-dir", dir / "model"},
                        "", dir / "train");
  ASSERT_EQ(p->Wait(60s), 0) << p->Stderr();
  Subprocess e({kTrainer, "--data-dir", kDataDir, "--evaluate-only", "--model", dir / "model"}, {},
               dir / "eval");
  ASSERT_EQ(e.Wait(60s), 0) << e.Stderr();
  auto ev = Events(e, "evaluation").at(0);
  auto end = Events(*p, "train_end").at(0);
  EXPECT_EQ(ev["weights_sha256"], end["weights_sha256"]);
  EXPECT_DOUBLE_EQ(ev["accuracy"].get<double>(), end["test_accuracy"].get<double>());
}

}  // namespace
}  // namespace tj::testing
