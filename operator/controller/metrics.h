// The operator's Prometheus metrics, under the names cluster admins already graph for Go
// operators: controller-runtime's (controller_runtime_reconcile_total{controller,result},
// ..._errors_total, ..._time_seconds), client-go's work queue (workqueue_depth, _adds_total,
// _retries_total, _queue_duration_seconds, _work_duration_seconds) and API-server client
// (rest_client_*, kube/request_metrics.h), the process collector's process_*,
// leader_election_master_status, a tj_operator_build_info gauge, per-namespace job counters
// (tj_operator_jobs_*_total{namespace}), what restarts and waiting cost by namespace and cause
// (tj_operator_lost_seconds_total, tj_operator_lost_steps_total, tj_operator_queued_seconds_total)
// and each running job's goodput (tj_operator_job_goodput_ratio{namespace,job}). Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "common/histogram.h"
#include "common/prometheus_text.h"
#include "common/thread_annotations.h"
#include "kube/request_metrics.h"

namespace tj::controller {

struct BuildInfo {
  std::string version;       // "0.1.0"
  std::string git_revision;  // "1a2b3c4d5e6f", or "" when unknown
};

class OperatorMetrics {
 public:
  explicit OperatorMetrics(BuildInfo build = {}) : build_(std::move(build)) {}
  OperatorMetrics(const OperatorMetrics&) = delete;
  OperatorMetrics& operator=(const OperatorMetrics&) = delete;

  void ReconcileDone(const std::string& result,
                     double seconds);  // success|error|requeue|requeue_after
  // A job of namespace `ns` seen for the first time, succeeded, failed, gang-restarted.
  void JobCreated(const std::string& ns) { CountJob(kCreated, ns); }
  void JobSucceeded(const std::string& ns) { CountJob(kSucceeded, ns); }
  void JobFailed(const std::string& ns) { CountJob(kFailed, ns); }
  void JobRestarted(const std::string& ns) { CountJob(kRestarted, ns); }
  // What a pass added to a job's status.goodput: time and global steps lost to restarts of
  // `cause`, time queued.
  void WorkLost(const std::string& ns, const std::string& cause, double seconds, int64_t steps);
  void Queued(const std::string& ns, double seconds);
  // Job ns/name's status.goodput.ratio as last written; Forget drops it (the job is gone).
  void SetGoodputRatio(const std::string& ns, const std::string& name, double ratio);
  void ForgetJob(const std::string& ns, const std::string& name);

  struct QueueStats {
    size_t depth = 0;
    uint64_t adds = 0, retries = 0;
    HistogramSnapshot queue_duration, work_duration;  // empty: not rendered
  };
  // The trainers' /status reads (TrainerStatusPoller): started since the start, and now.
  struct PollStats {
    uint64_t polls = 0;
    int in_flight = 0;
  };
  // Prometheus text format 0.0.4. `requests` (may be null): the API-server client's metrics;
  // `polls` (may be null): the status poller's. The process_* metrics are this process's,
  // from /proc.
  std::string Render(const QueueStats& queue, bool leader,
                     const kube::RequestMetrics* requests = nullptr,
                     const PollStats* polls = nullptr) const;

 private:
  enum JobCounter { kCreated, kSucceeded, kFailed, kRestarted, kNumJobCounters };
  void CountJob(JobCounter counter, const std::string& ns);
  void RenderGoodput(PrometheusText* o) const TJ_REQUIRES(mu_);

  static constexpr std::array<double, 10> kBuckets = {0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,  0.5,  1,     2.5,  10};
  const BuildInfo build_;
  mutable Mutex mu_;
  uint64_t success_ TJ_GUARDED_BY(mu_) = 0;
  uint64_t error_ TJ_GUARDED_BY(mu_) = 0;
  uint64_t requeue_ TJ_GUARDED_BY(mu_) = 0;
  uint64_t requeue_after_ TJ_GUARDED_BY(mu_) = 0;
  std::array<uint64_t, kBuckets.size()> buckets_ TJ_GUARDED_BY(mu_) = {};
  uint64_t count_ TJ_GUARDED_BY(mu_) = 0;
  double sum_ TJ_GUARDED_BY(mu_) = 0;
  // namespace -> count per JobCounter
  std::map<std::string, std::array<uint64_t, kNumJobCounters>> jobs_ TJ_GUARDED_BY(mu_);
  struct Lost {
    double seconds = 0;
    double steps = 0;
  };
  std::map<std::pair<std::string, std::string>, Lost> lost_ TJ_GUARDED_BY(mu_);      // (ns, cause)
  std::map<std::string, double> queued_ TJ_GUARDED_BY(mu_);                          // ns
  std::map<std::pair<std::string, std::string>, double> ratios_ TJ_GUARDED_BY(mu_);  // (ns, job)
};

}  // namespace tj::controller
