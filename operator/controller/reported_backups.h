// The backups that stopped chiefs reported in their termination messages, kept per job from
// the pod informer's events. A pass reads a job's pods from the cache, and a pod whose trainer
// has just ended is often deleted right after (an eviction, a preemption, a Kueue drain, a gang
// restart): its last state can leave the cache before any pass has read it. The step the job
// resumes from must not go with it, so the informer's handlers note it here as the events
// arrive, and each pass takes the newest one in (Observed::reported_backup).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/clock.h"
#include "common/thread_annotations.h"

namespace tj::controller {

class ReportedBackups {
 public:
  // `clock`: not owned; RealClock when null.
  explicit ReportedBackups(Clock* clock = nullptr);

  // From a pod event (an update or a delete): the backup its trainer reported as it ended
  // ({epoch, step, time}, TerminatedContainer::last_backup), kept for its job
  // ("namespace/<tjo.dev/job-name>") when it is the newest. Cheap for pods that say nothing.
  // Thread-safe.
  void Note(const nlohmann::json& pod);

  // The newest backup noted for `job_key`; null when none was in the last 10 minutes (by
  // then every pass has taken it into the job's status). Thread-safe.
  nlohmann::json Newest(const std::string& job_key);

 private:
  struct Entry {
    nlohmann::json backup;
    Clock::TimePoint noted;
  };
  Clock* const clock_;
  Mutex mu_;
  std::map<std::string, Entry> entries_ TJ_GUARDED_BY(mu_);
};

}  // namespace tj::controller
