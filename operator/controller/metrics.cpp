#include "operator/controller/metrics.h"

#include <sstream>

namespace tj::controller {

void OperatorMetrics::ReconcileDone(const std::string& result, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (result == "success") ++success_;
  if (result == "error") ++error_;
  if (result == "requeue") ++requeue_;
  if (result == "requeue_after") ++requeue_after_;
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++buckets_[i];
  }
  ++count_;
  sum_ += seconds;
}

std::string OperatorMetrics::Render(const QueueStats& queue, bool leader) const {
  std::ostringstream o;
  const std::string c = "controller=\"trainingjob\"";
  std::lock_guard<std::mutex> lock(mu_);
  o << "# HELP controller_runtime_reconcile_total Total number of reconciliations per controller\n"
    << "# TYPE controller_runtime_reconcile_total counter\n";
  for (auto [r, n] : {std::pair<const char*, uint64_t>{"success", success_},
                      {"error", error_},
                      {"requeue", requeue_},
                      {"requeue_after", requeue_after_}}) {
    o << "controller_runtime_reconcile_total{" << c << ",result=\"" << r << "\"} " << n << "\n";
  }
  o << "# HELP controller_runtime_reconcile_errors_total Total number of reconciliation errors\n"
    << "# TYPE controller_runtime_reconcile_errors_total counter\n"
    << "controller_runtime_reconcile_errors_total{" << c << "} " << error_ << "\n";
  o << "# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation\n"
    << "# TYPE controller_runtime_reconcile_time_seconds histogram\n";
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    o << "controller_runtime_reconcile_time_seconds_bucket{" << c << ",le=\"" << kBuckets[i]
      << "\"} " << buckets_[i] << "\n";
  }
  o << "controller_runtime_reconcile_time_seconds_bucket{" << c << ",le=\"+Inf\"} " << count_
    << "\n"
    << "controller_runtime_reconcile_time_seconds_sum{" << c << "} " << sum_ << "\n"
    << "controller_runtime_reconcile_time_seconds_count{" << c << "} " << count_ << "\n";
  const std::string q = "name=\"trainingjob\"";
  o << "# HELP workqueue_depth Current depth of workqueue\n# TYPE workqueue_depth gauge\n"
    << "workqueue_depth{" << q << "} " << queue.depth << "\n"
    << "# HELP workqueue_adds_total Total number of adds handled by workqueue\n"
    << "# TYPE workqueue_adds_total counter\nworkqueue_adds_total{" << q << "} " << queue.adds
    << "\n"
    << "# HELP workqueue_retries_total Total number of retries handled by workqueue\n"
    << "# TYPE workqueue_retries_total counter\nworkqueue_retries_total{" << q << "} "
    << queue.retries << "\n"
    << "# HELP leader_election_master_status Whether this instance leads (1) or not (0)\n"
    << "# TYPE leader_election_master_status gauge\n"
    << "leader_election_master_status{name=\"tj-operator\"} " << (leader ? 1 : 0) << "\n";
  for (auto [name, help, v] :
       {std::tuple<const char*, const char*, uint64_t>{"tj_operator_jobs_created_total",
                                                       "TrainingJobs seen for the first time",
                                                       jobs_created_.load()},
        {"tj_operator_jobs_successful_total", "TrainingJobs that succeeded",
         jobs_succeeded_.load()},
        {"tj_operator_jobs_failed_total", "TrainingJobs that failed", jobs_failed_.load()},
        {"tj_operator_jobs_restarted_total", "Gang restarts", jobs_restarted_.load()}}) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n"
      << name << " " << v << "\n";
  }
  return o.str();
}

}  // namespace tj::controller
