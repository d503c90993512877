// The one retry delay of the project: exponential delays with a cap and optional jitter, used
// by the Kubernetes client (reconnects, API retries, leader election), the operator's gang
// restarts, the process node's container restarts and the trainer's connection retries.
// Pure: no clock, no sleeping. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace tj {

using BackoffDuration = std::chrono::steady_clock::duration;

// base * factor^n, capped at max, without overflow for any n.
BackoffDuration ExponentialDelay(BackoffDuration base, BackoffDuration max, double factor, int n);

class ExponentialBackoff {
 public:
  // Delays initial, initial*factor, ... capped at max; each then grows by a random fraction in
  // [0, jitter) of itself (jitter 0: deterministic). `seed` makes the jitter reproducible.
  ExponentialBackoff(BackoffDuration initial, BackoffDuration max, double factor = 2.0,
                     double jitter = 0.0, uint64_t seed = 0);

  BackoffDuration Next();  // the delay before the next attempt; advances
  void Reset() { attempts_ = 0; }
  int attempts() const { return attempts_; }

 private:
  BackoffDuration initial_, max_;
  double factor_, jitter_;
  int attempts_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace tj
