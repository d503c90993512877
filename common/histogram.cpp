#include "common/histogram.h"

#include <algorithm>

namespace tj {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}

void Histogram::Observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  MutexLock lock(mu_);
  if (i < counts_.size()) ++counts_[i];
  ++count_;
  sum_ += value;
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.bounds = bounds_;
  MutexLock lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = count_;
  s.sum = sum_;
  return s;
}

std::vector<double> Histogram::WorkQueueBuckets() {
  std::vector<double> b;
  for (double v = 1e-9; v <= 10.0 * 1.0001; v *= 10) b.push_back(v);
  return b;
}

std::vector<double> Histogram::RequestBuckets() {
  return {0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60};
}

}  // namespace tj
