// A Prometheus-style histogram: fixed upper bounds, a count per bucket, the sum and the count
// of observations. Observe() is thread-safe; Snapshot() copies a consistent state for
// PrometheusText::Histogram (common/prometheus_text.h).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "common/thread_annotations.h"

namespace tj {

struct HistogramSnapshot {
  std::vector<double> bounds;        // upper bounds, ascending (+Inf implied)
  std::vector<uint64_t> cumulative;  // observations <= bounds[i]
  uint64_t count = 0;
  double sum = 0;
};

class Histogram {
 public:
  // `bounds` ascending; an observation above the last one counts only in +Inf.
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double value);
  HistogramSnapshot Snapshot() const;

  // client-go's and controller-runtime's buckets, so dashboards built for them fit.
  // workqueue_*_duration_seconds: 1 ns .. 10 s, powers of ten.
  static std::vector<double> WorkQueueBuckets();
  // rest_client_request_duration_seconds: 5 ms .. 60 s.
  static std::vector<double> RequestBuckets();

 private:
  const std::vector<double> bounds_;
  mutable Mutex mu_;
  std::vector<uint64_t> counts_ TJ_GUARDED_BY(mu_);  // per bucket, not cumulative
  uint64_t count_ TJ_GUARDED_BY(mu_) = 0;
  double sum_ TJ_GUARDED_BY(mu_) = 0;
};

}  // namespace tj
