#include "operator/controller/reported_backups.h"

#include <utility>

#include "kube/object_meta.h"
#include "kube/resource.h"
#include "operator/api/training_job.h"
#include "operator/controller/pod_view.h"
#include "operator/controller/reconciler.h"

namespace tj::controller {

using nlohmann::json;

namespace {
constexpr std::chrono::minutes kForgetAfter{10};
}  // namespace

ReportedBackups::ReportedBackups(Clock* clock)
    : clock_(clock != nullptr ? clock : RealClock::Get()) {}

void ReportedBackups::Note(const json& pod) {
  // Most events are of pods that run: no view is made of them.
  if (pod.dump().find("lastBackup") == std::string::npos) return;
  const std::string job = kube::LabelOf(pod, api::kLabelJobName);
  if (job.empty()) return;
  const json reported = NewestReportedBackup({ViewOfPod(pod)});
  if (reported.is_null()) return;
  const std::string key = kube::ObjectKey(kube::TextOf(kube::MetadataOf(pod), "namespace"), job);
  const Clock::TimePoint now = clock_->Now();
  MutexLock lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = now - it->second.noted > kForgetAfter ? entries_.erase(it) : std::next(it);
  }
  Entry& e = entries_[key];
  json progress = e.backup.is_null() ? json::object() : json{{"lastBackup", e.backup}};
  if (TakeNewerBackup(progress, reported)) {
    e.backup = reported;
    e.noted = now;
  }
}

json ReportedBackups::Newest(const std::string& job_key) {
  MutexLock lock(mu_);
  auto it = entries_.find(job_key);
  if (it == entries_.end() || clock_->Now() - it->second.noted > kForgetAfter) return nullptr;
  return it->second.backup;
}

}  // namespace tj::controller
