#include "common/backoff.h"

#include <cmath>

namespace tj {

BackoffDuration ExponentialDelay(BackoffDuration base, BackoffDuration max, double factor, int n) {
  double d = static_cast<double>(base.count()) * std::pow(factor, n);
  if (!std::isfinite(d) || d >= static_cast<double>(max.count())) return max;
  return BackoffDuration(static_cast<BackoffDuration::rep>(d));
}

ExponentialBackoff::ExponentialBackoff(BackoffDuration initial, BackoffDuration max, double factor,
                                       double jitter, uint64_t seed)
    : initial_(initial), max_(max), factor_(factor), jitter_(jitter), rng_(seed) {}

BackoffDuration ExponentialBackoff::Next() {
  BackoffDuration d = ExponentialDelay(initial_, max_, factor_, attempts_);
  ++attempts_;
  if (jitter_ > 0) {
    std::uniform_real_distribution<double> u(0.0, jitter_);
    d += BackoffDuration(
        static_cast<BackoffDuration::rep>(static_cast<double>(d.count()) * u(rng_)));
  }
  return d;
}

}  // namespace tj
