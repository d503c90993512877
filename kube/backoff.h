// The work queue's per-item backoff (client-go's ItemExponentialFailureRateLimiter: 5 ms *
// 2^failures, at most 1000 s), built on common/backoff.h, the project's one retry delay.
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>

#include "common/backoff.h"
#include "common/thread_annotations.h"

namespace tj::kube {

using Duration = std::chrono::steady_clock::duration;

// Per-item exponential backoff. Thread-safe.
class ItemExponentialBackoff {
 public:
  explicit ItemExponentialBackoff(Duration base = std::chrono::milliseconds(5),
                                  Duration max = std::chrono::seconds(1000))
      : base_(base), max_(max) {}

  Duration When(const std::string& item);  // the delay for this failure; counts it
  void Forget(const std::string& item);    // the item succeeded: start over
  int NumRequeues(const std::string& item) const;

 private:
  Duration base_, max_;
  mutable Mutex mu_;
  std::unordered_map<std::string, int> failures_ TJ_GUARDED_BY(mu_);
};

}  // namespace tj::kube
