// The operator's Prometheus metrics, with controller-runtime's names where they apply
// (controller_runtime_reconcile_total{controller,result}, ..._errors_total, ..._time_seconds,
// workqueue_*, leader_election_master_status) plus job counters. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace tj::controller {

class OperatorMetrics {
 public:
  void ReconcileDone(const std::string& result,
                     double seconds);  // success|error|requeue|requeue_after
  void JobCreated() { ++jobs_created_; }
  void JobSucceeded() { ++jobs_succeeded_; }
  void JobFailed() { ++jobs_failed_; }
  void JobRestarted() { ++jobs_restarted_; }

  struct QueueStats {
    size_t depth = 0;
    uint64_t adds = 0, retries = 0;
  };
  // Prometheus text format 0.0.4.
  std::string Render(const QueueStats& queue, bool leader) const;

 private:
  static constexpr std::array<double, 10> kBuckets = {0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,  0.5,  1,     2.5,  10};
  mutable std::mutex mu_;
  uint64_t success_ = 0, error_ = 0, requeue_ = 0, requeue_after_ = 0;  // GUARDED_BY(mu_)
  std::array<uint64_t, kBuckets.size()> buckets_{};                     // GUARDED_BY(mu_)
  uint64_t count_ = 0;                                                  // GUARDED_BY(mu_)
  double sum_ = 0;                                                      // GUARDED_BY(mu_)
  std::atomic<uint64_t> jobs_created_{0}, jobs_succeeded_{0}, jobs_failed_{0}, jobs_restarted_{0};
};

}  // namespace tj::controller
