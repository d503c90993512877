#include "operator/kube/backoff.h"

#include <cmath>

namespace tj::kube {

Duration ExponentialDelay(Duration base, Duration max, double factor, int n) {
  double d = static_cast<double>(base.count()) * std::pow(factor, n);
  if (!std::isfinite(d) || d >= static_cast<double>(max.count())) return max;
  return Duration(static_cast<Duration::rep>(d));
}

ExponentialBackoff::ExponentialBackoff(Duration initial, Duration max, double factor, double jitter,
                                       uint64_t seed)
    : initial_(initial), max_(max), factor_(factor), jitter_(jitter), rng_(seed) {}

Duration ExponentialBackoff::Next() {
  Duration d = ExponentialDelay(initial_, max_, factor_, attempts_);
  ++attempts_;
  if (jitter_ > 0) {
    std::uniform_real_distribution<double> u(0.0, jitter_);
    d += Duration(static_cast<Duration::rep>(static_cast<double>(d.count()) * u(rng_)));
  }
  return d;
}

Duration ItemExponentialBackoff::When(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  int n = failures_[item]++;
  return ExponentialDelay(base_, max_, 2.0, n);
}

void ItemExponentialBackoff::Forget(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(item);
}

int ItemExponentialBackoff::NumRequeues(const std::string& item) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(item);
  return it == failures_.end() ? 0 : it->second;
}

}  // namespace tj::kube
