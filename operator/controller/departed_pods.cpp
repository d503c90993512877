#include "operator/controller/departed_pods.h"

#include <utility>

#include "kube/object_meta.h"
#include "kube/resource.h"
#include "operator/api/training_job.h"
#include "operator/controller/cache_transforms.h"

namespace tj::controller {

using nlohmann::json;

namespace {
constexpr std::chrono::minutes kForgetAfter{10};

// The uid of the pod's controlling TrainingJob; "" when it has none.
std::string OwnerUid(const json& pod) {
  const json* ref = TrainingJobControllerRef(pod);
  return ref != nullptr ? kube::TextOf(*ref, "uid") : "";
}
}  // namespace

DepartedPods::DepartedPods(Clock* clock) : clock_(clock != nullptr ? clock : RealClock::Get()) {}

void DepartedPods::Note(const json& pod) {
  const std::string job = kube::LabelOf(pod, api::kLabelJobName);
  if (job.empty()) return;
  PodView view = ViewOfPod(pod);
  // A pod that says nothing of how it ended reads the same missing: not worth keeping.
  if (view.disruption.empty() && view.reason.empty() && !view.trainer_terminated) return;
  if (view.name.empty() || view.gang < 0) return;
  view.being_deleted = true;  // it was, whatever its last event showed
  const std::string key = kube::ObjectKey(kube::TextOf(kube::MetadataOf(pod), "namespace"), job);
  const Clock::TimePoint now = clock_->Now();
  MutexLock lock(mu_);
  ForgetOld(now);
  auto& pods = jobs_[key];
  std::string name = view.name;
  const bool added =
      pods.insert_or_assign(std::move(name), Entry{OwnerUid(pod), std::move(view), now}).second;
  if (added) ++pods_;
  while (pods_ > kMaxPods) {  // the oldest entry of all goes
    auto oldest_job = jobs_.end();
    std::map<std::string, Entry>::iterator oldest;
    for (auto j = jobs_.begin(); j != jobs_.end(); ++j) {
      for (auto p = j->second.begin(); p != j->second.end(); ++p) {
        if (oldest_job == jobs_.end() || p->second.noted < oldest->second.noted) {
          oldest_job = j;
          oldest = p;
        }
      }
    }
    oldest_job->second.erase(oldest);
    --pods_;
    if (oldest_job->second.empty()) jobs_.erase(oldest_job);
  }
}

std::vector<PodView> DepartedPods::Of(const std::string& job_key, const std::string& job_uid) {
  std::vector<PodView> out;
  MutexLock lock(mu_);
  auto j = jobs_.find(job_key);
  if (j == jobs_.end()) return out;
  const Clock::TimePoint now = clock_->Now();
  for (const auto& [name, e] : j->second) {
    if (e.owner_uid == job_uid && now - e.noted <= kForgetAfter) out.push_back(e.view);
  }
  return out;
}

void DepartedPods::ForgetOld(Clock::TimePoint now) {
  // A sweep a minute at most: Of() skips what has expired meanwhile.
  if (now - last_sweep_ < std::chrono::minutes(1)) return;
  last_sweep_ = now;
  for (auto j = jobs_.begin(); j != jobs_.end();) {
    for (auto p = j->second.begin(); p != j->second.end();) {
      if (now - p->second.noted > kForgetAfter) {
        p = j->second.erase(p);
        --pods_;
      } else {
        ++p;
      }
    }
    j = j->second.empty() ? jobs_.erase(j) : std::next(j);
  }
}

}  // namespace tj::controller
