// How a job's pods that are gone from the API server last looked, kept from the pod informer's
// delete events. A gang pod that ends while the operator waits for the rest of its gang
// (FailOrRestartGang's settle time) is often deleted meanwhile: an evicted or drained pod goes
// as soon as its trainer exits, and with it its DisruptionTarget condition and exit code. A
// pass that then finds it missing would take it for a plain deletion; with its last view it
// judges the pod as it ended (Observed::departed).
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "operator/controller/pod_view.h"

namespace tj::controller {

class DepartedPods {
 public:
  // At most this many pods are kept at once, the oldest forgotten first: a tenant can delete
  // pods of a job of any size, and can label pods of its own.
  static constexpr size_t kMaxPods = 20000;

  // `clock`: not owned; RealClock when null.
  explicit DepartedPods(Clock* clock = nullptr);

  // From a pod informer's delete event (the pod's last state): kept when it says how the pod
  // ended (a disruption, a status reason, its trainer's exit), for 10 minutes. Thread-safe.
  void Note(const nlohmann::json& pod);

  // The last views of the pods of job `job_key` ("namespace/name") whose controller is the
  // TrainingJob of `job_uid`, gone in the last 10 minutes. Thread-safe.
  std::vector<PodView> Of(const std::string& job_key, const std::string& job_uid);

 private:
  struct Entry {
    std::string owner_uid;
    PodView view;
    Clock::TimePoint noted;
  };
  void ForgetOld(Clock::TimePoint now) TJ_REQUIRES(mu_);

  Clock* const clock_;
  Mutex mu_;
  // job key -> pod name -> its last view.
  std::map<std::string, std::map<std::string, Entry>> jobs_ TJ_GUARDED_BY(mu_);
  size_t pods_ TJ_GUARDED_BY(mu_) = 0;
  Clock::TimePoint last_sweep_ TJ_GUARDED_BY(mu_){};
};

}  // namespace tj::controller
