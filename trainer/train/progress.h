// What a running trainer reports on /status and /metrics: updated by the training or
// evaluation loop, read by the status server's thread. Thread-safe.
#pragma once

#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/thread_annotations.h"

namespace tj::train {

struct ProgressSnapshot {
  std::string role;                // "chief", "worker", "evaluator"
  std::string state = "starting";  // starting, training, evaluating, succeeded, failed
  std::string cpu_target;          // the CPU kernels' SIMD target: avx512, avx2, sse4, ...
  int epoch = 0;                   // the epoch in progress (1-based), or the last one completed
  int total_epochs = 0;
  int64_t step = 0;  // steps done in the epoch in progress
  int64_t global_step = 0;
  std::optional<double> loss, accuracy, images_per_sec;
  std::optional<nlohmann::json> last_backup;  // {epoch, step, path}
  std::optional<nlohmann::json> evaluation;   // {checkpoint, epoch, loss, accuracy}
};

class Progress {
 public:
  template <typename F>
  void Update(F&& f) {
    MutexLock lock(mu_);
    f(snapshot_);
  }
  ProgressSnapshot Get() const {
    MutexLock lock(mu_);
    return snapshot_;
  }
  nlohmann::json StatusJson() const;
  std::string PrometheusText() const;

 private:
  mutable Mutex mu_;
  ProgressSnapshot snapshot_ TJ_GUARDED_BY(mu_);
};

}  // namespace tj::train
