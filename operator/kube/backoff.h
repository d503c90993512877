// The one retry/backoff helper of the Kubernetes client: exponential delays with a cap and
// optional jitter (reconnects, API retries, leader election), and the work queue's per-item
// variant (client-go's ItemExponentialFailureRateLimiter: 5 ms * 2^failures, at most 1000 s).
// Pure: no clock, no sleeping. Not thread-safe unless stated.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>

namespace tj::kube {

using Duration = std::chrono::steady_clock::duration;

class ExponentialBackoff {
 public:
  // Delays initial, initial*factor, ... capped at max; each then grows by a random fraction in
  // [0, jitter) of itself (jitter 0: deterministic). `seed` makes the jitter reproducible.
  ExponentialBackoff(Duration initial, Duration max, double factor = 2.0, double jitter = 0.0,
                     uint64_t seed = 0);

  Duration Next();  // the delay before the next attempt; advances
  void Reset() { attempts_ = 0; }
  int attempts() const { return attempts_; }

 private:
  Duration initial_, max_;
  double factor_, jitter_;
  int attempts_ = 0;
  std::mt19937_64 rng_;
};

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
  mutable std::mutex mu_;
  std::unordered_map<std::string, int> failures_;
};

// base * factor^n, capped at max, without overflow for any n.
Duration ExponentialDelay(Duration base, Duration max, double factor, int n);

}  // namespace tj::kube
