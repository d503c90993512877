#include "kube/rate_limiter.h"

#include <algorithm>

namespace tj::kube {

TokenBucket::TokenBucket(double qps, int burst, Clock* clock)
    : qps_(qps), burst_(std::max(1, burst)), clock_(clock), tokens_(burst_), last_(clock->Now()) {}

Clock::Duration TokenBucket::Reserve() {
  if (qps_ <= 0) return Clock::Duration::zero();
  MutexLock lock(mu_);
  auto now = clock_->Now();
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + SecondsBetween(last_, now) * qps_);
    last_ = now;
  }
  tokens_ -= 1;  // may go negative: a debt that later callers queue behind
  if (tokens_ >= 0) return Clock::Duration::zero();
  return std::chrono::duration_cast<Clock::Duration>(
      std::chrono::duration<double>(-tokens_ / qps_));
}

void TokenBucket::Wait() {
  auto d = Reserve();
  if (d > Clock::Duration::zero()) clock_->SleepFor(d);
}

}  // namespace tj::kube
