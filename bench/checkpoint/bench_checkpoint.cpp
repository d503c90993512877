// tj-bench-checkpoint: times one backup of a 347,146-parameter model with Adam state
// (weights, adam_m, adam_v: 3 x 1.39 MB of float32), the way the chief writes it every
// --save-freq steps, and the read back a restarting worker does. Reports the median over
// --runs runs (and min/max), as text and as one JSON line.
//
//   tj-bench-checkpoint [--dir DIR] [--runs N] [--params P]
//
// DIR defaults to a fresh directory under $TMPDIR (or /tmp); run it on the volume the
// backups will live on, since fsync dominates.
#include <sys/vfs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "trainer/checkpoint/backup_manager.h"
#include "trainer/checkpoint/state_file.h"

namespace {

using tj::checkpoint::BackupManager;
using tj::checkpoint::TrainingState;

struct Stats {
  double median_ms, min_ms, max_ms;
};

Stats Summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  const double median = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  return {median, ms.front(), ms.back()};
}

double TimeMs(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::string FsType(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0x01021994:
      return "tmpfs";
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x794c7630:
      return "overlayfs";
    case 0x9123683E:
      return "btrfs";
    case 0x6969:
      return "nfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(s.f_type));
      return buf;
    }
  }
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int runs = 20;
  long params = 347146;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--dir") {
      dir = next();
    } else if (arg == "--runs") {
      runs = std::atoi(next().c_str());
    } else if (arg == "--params") {
      params = std::atol(next().c_str());
    } else {
      std::fprintf(stderr, "usage: tj-bench-checkpoint [--dir DIR] [--runs N] [--params P]\n");
      return 2;
    }
  }
  if (runs < 1 || params < 1) return Fail("--runs and --params must be positive");
  bool made_dir = false;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/tj-bench-ckpt-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return Fail("cannot create a directory under " + tmpl);
    dir = tmpl;
    made_dir = true;
  }

  TrainingState state;
  state.fingerprint = {{"model", "conv32-maxpool-dense64-dense10"},
                       {"batch_size", 64},
                       {"workers", 2},
                       {"dataset", "fashion-mnist"}};
  state.epoch = 2;
  state.step = 100;
  state.optimizer_iterations = 2 * 938 + 100;
  state.seed = 42;
  state.extra = {{"loss_sum", 123.4}, {"correct", 5000}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (const char* name : {"weights", "adam_m", "adam_v"}) {
    std::vector<float> v(static_cast<size_t>(params));
    for (float& x : v) x = normal(rng);
    state.tensors.emplace_back(name, std::move(v));
  }

  BackupManager backups(dir + "/backup", nullptr);
  std::vector<double> encode_ms, save_ms, restore_ms;
  size_t bytes = 0;
  for (int r = 0; r < runs; ++r) {
    state.step = int64_t{100} * (r + 1);
    encode_ms.push_back(TimeMs([&] {
      auto b = tj::checkpoint::EncodeState(state, "bench key");
      bytes = b.ok() ? b->size() : 0;
    }));
    tj::Status status;
    save_ms.push_back(TimeMs([&] { status = backups.Save(state); }));
    if (!status.ok()) return Fail(status.message());
    tj::StatusOr<std::optional<TrainingState>> restored = std::optional<TrainingState>();
    restore_ms.push_back(TimeMs([&] { restored = backups.Restore(state.fingerprint); }));
    if (!restored.ok()) return Fail(restored.status().message());
    if (!restored->has_value() || (*restored)->step != state.step) return Fail("restore mismatch");
  }
  const Stats enc = Summarise(encode_ms), save = Summarise(save_ms), rest = Summarise(restore_ms);
  const std::string fs = FsType(dir);
  std::printf("backup of %ld parameters x 3 tensors (%zu bytes) in %s (%s), %d runs\n", params,
              bytes, dir.c_str(), fs.c_str(), runs);
  std::printf("  encode (serialise + SHA-256):        median %7.2f ms  min %7.2f  max %7.2f\n",
              enc.median_ms, enc.min_ms, enc.max_ms);
  std::printf("  BackupManager::Save (atomic+fsync):  median %7.2f ms  min %7.2f  max %7.2f\n",
              save.median_ms, save.min_ms, save.max_ms);
  std::printf("  BackupManager::Restore (read+verify): median %7.2f ms  min %7.2f  max %7.2f\n",
              rest.median_ms, rest.min_ms, rest.max_ms);
  nlohmann::json line = {{"event", "bench_checkpoint"},
                         {"params", params},
                         {"bytes", bytes},
                         {"runs", runs},
                         {"filesystem", fs},
                         {"encode_ms_median", enc.median_ms},
                         {"save_ms_median", save.median_ms},
                         {"save_ms_min", save.min_ms},
                         {"save_ms_max", save.max_ms},
                         {"restore_ms_median", rest.median_ms}};
  std::printf("%s\n", line.dump().c_str());
  if (made_dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return 0;
}
