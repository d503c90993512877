#include "operator/controller/metrics.h"

#include "common/process_metrics.h"
#include "common/prometheus_text.h"

namespace tj::controller {

void OperatorMetrics::ReconcileDone(const std::string& result, double seconds) {
  MutexLock lock(mu_);
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

void OperatorMetrics::CountJob(JobCounter counter, const std::string& ns) {
  MutexLock lock(mu_);
  ++jobs_[ns][counter];  // a new namespace's array is value-initialized (zeros)
}

std::string OperatorMetrics::Render(const QueueStats& queue, bool leader,
                                    const kube::RequestMetrics* requests,
                                    const PollStats* polls) const {
  PrometheusText o;
  {
    MutexLock lock(mu_);
    const PrometheusText::Labels c = {{"controller", "trainingjob"}};
    o.Declare("controller_runtime_reconcile_total",
              "Total number of reconciliations per controller", "counter");
    for (auto [r, n] : {std::pair<const char*, uint64_t>{"success", success_},
                        {"error", error_},
                        {"requeue", requeue_},
                        {"requeue_after", requeue_after_}}) {
      o.Counter("controller_runtime_reconcile_total", "", static_cast<double>(n),
                {{"controller", "trainingjob"}, {"result", r}});
    }
    o.Counter("controller_runtime_reconcile_errors_total",
              "Total number of reconciliation errors per controller", static_cast<double>(error_),
              c);
    HistogramSnapshot h;
    h.bounds.assign(kBuckets.begin(), kBuckets.end());
    h.cumulative.assign(buckets_.begin(), buckets_.end());
    h.count = count_;
    h.sum = sum_;
    o.Histogram("controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller", h, c);

    static constexpr std::array<std::pair<const char*, const char*>, kNumJobCounters> kJobs = {{
        {"tj_operator_jobs_created_total", "TrainingJobs seen for the first time, by namespace"},
        {"tj_operator_jobs_successful_total", "TrainingJobs that succeeded, by namespace"},
        {"tj_operator_jobs_failed_total", "TrainingJobs that failed, by namespace"},
        {"tj_operator_jobs_restarted_total", "Gang restarts of TrainingJobs, by namespace"},
    }};
    for (size_t i = 0; i < kJobs.size(); ++i) {
      o.Declare(kJobs[i].first, kJobs[i].second, "counter");
      for (const auto& [ns, counts] : jobs_) {
        o.Counter(kJobs[i].first, "", static_cast<double>(counts[i]), {{"namespace", ns}});
      }
    }
    RenderGoodput(&o);
  }
  const PrometheusText::Labels q = {{"name", "trainingjob"}};
  o.Gauge("workqueue_depth", "Current depth of workqueue", static_cast<double>(queue.depth), q);
  o.Counter("workqueue_adds_total", "Total number of adds handled by workqueue",
            static_cast<double>(queue.adds), q);
  o.Counter("workqueue_retries_total", "Total number of retries handled by workqueue",
            static_cast<double>(queue.retries), q);
  if (!queue.queue_duration.bounds.empty()) {
    o.Histogram("workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                queue.queue_duration, q);
  }
  if (!queue.work_duration.bounds.empty()) {
    o.Histogram("workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes", queue.work_duration,
                q);
  }
  o.Gauge("leader_election_master_status", "Whether this instance leads (1) or not (0)",
          leader ? 1 : 0, {{"name", "tj-operator"}});
  o.Gauge("tj_operator_build_info",
          "The operator's version and git revision; the value is always 1", 1,
          {{"version", build_.version},
           {"git_revision", build_.git_revision.empty() ? "unknown" : build_.git_revision}});
  if (polls != nullptr) {
    o.Counter("tj_operator_trainer_status_polls_total",
              "Reads of a trainer's /status started (each pod at most once per "
              "--progress-poll-seconds)",
              static_cast<double>(polls->polls));
    o.Gauge("tj_operator_trainer_status_polls_in_flight", "Reads of a trainer's /status running",
            polls->in_flight);
  }
  if (requests != nullptr) requests->Render(&o);
  RenderProcessMetrics(&o);
  return o.str();
}

void OperatorMetrics::WorkLost(const std::string& ns, const std::string& cause, double seconds,
                               int64_t steps) {
  MutexLock lock(mu_);
  Lost& l = lost_[{ns, cause}];
  l.seconds += seconds;
  l.steps += static_cast<double>(steps);
}

void OperatorMetrics::Queued(const std::string& ns, double seconds) {
  MutexLock lock(mu_);
  queued_[ns] += seconds;
}

void OperatorMetrics::SetGoodputRatio(const std::string& ns, const std::string& name,
                                      double ratio) {
  MutexLock lock(mu_);
  ratios_[{ns, name}] = ratio;
}

void OperatorMetrics::ForgetJob(const std::string& ns, const std::string& name) {
  MutexLock lock(mu_);
  ratios_.erase({ns, name});
}

void OperatorMetrics::RenderGoodput(PrometheusText* o) const {
  o->Declare("tj_operator_lost_seconds_total",
             "Time lost to gang restarts (the work since the last backup, and the recovery to "
             "the next gang's first step), by namespace and restart cause",
             "counter");
  o->Declare("tj_operator_lost_steps_total",
             "Global steps lost to gang restarts (reached beyond the last backup), by namespace "
             "and restart cause",
             "counter");
  for (const auto& [key, l] : lost_) {
    const PrometheusText::Labels labels = {{"namespace", key.first}, {"cause", key.second}};
    o->Counter("tj_operator_lost_seconds_total", "", l.seconds, labels);
    o->Counter("tj_operator_lost_steps_total", "", l.steps, labels);
  }
  o->Declare("tj_operator_queued_seconds_total",
             "Time TrainingJobs waited for Kueue's admission, by namespace", "counter");
  for (const auto& [ns, seconds] : queued_) {
    o->Counter("tj_operator_queued_seconds_total", "", seconds, {{"namespace", ns}});
  }
  o->Declare("tj_operator_job_goodput_ratio",
             "A TrainingJob's time trained over its time since creation (status.goodput.ratio)",
             "gauge");
  for (const auto& [key, ratio] : ratios_) {
    o->Gauge("tj_operator_job_goodput_ratio", "", ratio,
             {{"namespace", key.first}, {"job", key.second}});
  }
}

}  // namespace tj::controller
