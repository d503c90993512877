#include "kube/backoff.h"

namespace tj::kube {

Duration ItemExponentialBackoff::When(const std::string& item) {
  MutexLock lock(mu_);
  int n = failures_[item]++;
  return ExponentialDelay(base_, max_, 2.0, n);
}

void ItemExponentialBackoff::Forget(const std::string& item) {
  MutexLock lock(mu_);
  failures_.erase(item);
}

int ItemExponentialBackoff::NumRequeues(const std::string& item) const {
  MutexLock lock(mu_);
  auto it = failures_.find(item);
  return it == failures_.end() ? 0 : it->second;
}

}  // namespace tj::kube
