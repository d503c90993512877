// Helpers for tests that run the real tj-trainer binary on the real Fashion-MNIST files:
// start processes with a TF_CONFIG, read their JSON events, compare digests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace tj::testing {

inline const std::string kTrainer = std::string(TJ_BIN_DIR) + "/tj-trainer";
inline const std::string kDataDir = "/usr/share/datasets/fashion-mnist";

// True where a missing dataset must fail the test rather than skip it: in CI (CI or
// TJ_REQUIRE_DATASET set), which installs it with the other dependencies.
inline bool DatasetRequired() {
  return std::getenv("CI") != nullptr || std::getenv("TJ_REQUIRE_DATASET") != nullptr;
}

// Skips the test (with the reason) when the dataset is not installed; fails it in CI.
#define TJ_REQUIRE_DATASET()                                                               \
  if (!std::filesystem::exists(::tj::testing::kDataDir + "/train-images-idx3-ubyte.gz")) { \
    if (::tj::testing::DatasetRequired()) {                                                \
      FAIL() << "Fashion-MNIST not installed at " << ::tj::testing::kDataDir               \
             << " (hack/install-deps.sh installs dataset-fashion-mnist)";                  \
    }                                                                                      \
    GTEST_SKIP() << "Fashion-MNIST not installed at " << ::tj::testing::kDataDir           \
                 << " (hack/install-deps.sh installs dataset-fashion-mnist)";              \
  }

// The JSON events of a run's stdout, optionally only those of one kind.
inline std::vector<nlohmann::json> Events(const Subprocess& p, const std::string& kind = "") {
  std::vector<nlohmann::json> out;
  for (const std::string& line : p.StdoutLines()) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (kind.empty() || j.value("event", "") == kind) out.push_back(j);
  }
  return out;
}

inline std::string Digest(const Subprocess& p) {
  auto ends = Events(p, "train_end");
  return ends.empty() ? "" : ends.back().value("weights_sha256", "");
}

// The TF_CONFIG cluster of `workers` workers (and a chief / evaluator when asked) on loopback
// ports: trainer processes of one host, no Kubernetes.
struct LoopbackTfCluster {
  std::vector<int> chief, worker, evaluator;

  static LoopbackTfCluster Make(int workers, bool with_chief = false, bool with_evaluator = false) {
    LoopbackTfCluster c;
    if (with_chief) c.chief.push_back(FreePort());
    for (int i = 0; i < workers; ++i) c.worker.push_back(FreePort());
    if (with_evaluator) c.evaluator.push_back(FreePort());
    return c;
  }
  std::string TfConfig(const std::string& type, int index) const {
    nlohmann::json cluster = nlohmann::json::object();
    auto list = [](const std::vector<int>& ports) {
      nlohmann::json a = nlohmann::json::array();
      for (int p : ports) a.push_back("localhost:" + std::to_string(p));
      return a;
    };
    if (!chief.empty()) cluster["chief"] = list(chief);
    cluster["worker"] = list(worker);
    if (!evaluator.empty()) cluster["evaluator"] = list(evaluator);
    return nlohmann::json{{"cluster", cluster}, {"task", {{"type", type}, {"index", index}}}}
        .dump();
  }
};

// The flags of a short CPU run on one thread that backs up every `save_freq` steps to
// dir/<tag>backup and writes its checkpoints to dir/<tag>ckpt, then `extra`.
inline std::vector<std::string> BackedUpRun(const TempDir& dir, const std::string& tag, int epochs,
                                            int steps_per_epoch, int save_freq,
                                            const std::vector<std::string>& extra = {}) {
  std::vector<std::string> f = {"--epochs",          std::to_string(epochs),
                                "--steps-per-epoch", std::to_string(steps_per_epoch),
                                "--threads",         "1",
                                "--save-freq",       std::to_string(save_freq),
                                "--backup-dir",      dir / (tag + "backup"),
                                "--checkpoint-dir",  dir / (tag + "ckpt")};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

// The rendezvous key the tests' multi-worker jobs share (the rendezvous requires one).
inline const std::string kTestKey = "test-rendezvous-key";

inline std::unique_ptr<Subprocess> StartTrainer(const std::vector<std::string>& flags,
                                                const std::string& tf_config,
                                                const std::string& log_prefix,
                                                const std::string& key = kTestKey,
                                                std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {kTrainer, "--data-dir", kDataDir};
  // These tests are about the CPU path (bitwise digests, Gloo): on a machine with one GPU,
  // --device auto would put every worker on it.
  if (std::find(flags.begin(), flags.end(), "--device") == flags.end()) {
    argv.insert(argv.end(), {"--device", "cpu"});
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  env["TF_CONFIG"] = tf_config;
  env["TJ_RENDEZVOUS_KEY"] = key;
  return std::make_unique<Subprocess>(argv, env, log_prefix);
}

}  // namespace tj::testing
