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

// Whether a container of the pod ended with a termination message that names a backup: a look
// at the messages only, not a serialization of the whole pod on every event.
bool SaysALastBackup(const json& pod) {
  const auto st = pod.find("status");
  if (st == pod.end() || !st->is_object()) return false;
  const auto cs = st->find("containerStatuses");
  if (cs == st->end() || !cs->is_array()) return false;
  for (const json& c : *cs) {
    const json* t = c.is_object() ? &c : nullptr;
    for (const char* key : {"state", "terminated"}) {
      if (t == nullptr) break;
      const auto it = t->find(key);
      t = it != t->end() && it->is_object() ? &*it : nullptr;
    }
    if (t != nullptr && kube::TextOf(*t, "message").find("lastBackup") != std::string::npos) {
      return true;
    }
  }
  return false;
}
}  // namespace

ReportedBackups::ReportedBackups(Clock* clock)
    : clock_(clock != nullptr ? clock : RealClock::Get()) {}

void ReportedBackups::Note(const json& pod) {
  // Most events are of pods that run: no view is made of them.
  if (!SaysALastBackup(pod)) return;
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
