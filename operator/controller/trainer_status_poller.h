// The trainers' /status polls, off the reconcile workers. A chief that never answers (behind a
// default-deny NetworkPolicy, or a program that accepts and stays silent) costs a poll its
// whole timeout; asked inside a reconcile pass, a dozen of them held every worker and stalled
// every tenant's jobs. Here a pass only reads the last answer and asks for a fresh one; the
// polls run on threads of their own, at most `max_in_flight` at once, each bounded in time by
// the fetch (ReadTrainerStatus: 1.5 s).
//
// The cost is bounded by design, whatever the trainer answers: a pod is polled at most once a
// `period` (--progress-poll-seconds), however often passes ask; of an answer only what the
// reconciler copies is kept (CopiedTrainerStatus: a few numbers, not up to 64 KiB), and only
// a change of that requeues the job. A trainer whose step advances every millisecond thus
// costs one poll, one extra pass and one status write a period, not one per answer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/clock.h"
#include "operator/controller/pod_view.h"

namespace tj::controller {

class TrainerStatusPoller {
 public:
  // `fetch` asks one pod (bounded in time; called on the poller's threads); `requeue` asks
  // for a pass of a job ("namespace/name"), called on the poller's threads when what the
  // reconciler copies of a poll's answer differs from the one before. A pod is polled at most
  // once a `period`, measured on `clock` (not owned; RealClock when null).
  using Fetch = std::function<std::optional<nlohmann::json>(const PodView& pod)>;
  using Requeue = std::function<void(const std::string& key)>;
  TrainerStatusPoller(Fetch fetch, Requeue requeue, int max_in_flight,
                      std::chrono::milliseconds period, Clock* clock = nullptr);
  // Waits for the polls in flight (each bounded by the fetch's timeout).
  ~TrainerStatusPoller();
  TrainerStatusPoller(const TrainerStatusPoller&) = delete;
  TrainerStatusPoller& operator=(const TrainerStatusPoller&) = delete;

  // Never blocks on the network: what the reconciler copies of the last answer of `pod` (of
  // job `key`, at its current IP) if one came, and a poll of it started, unless one is in
  // flight already, the last one ended less than a period ago, or max_in_flight are in
  // flight (then a later pass asks again). Answers not asked for in 10 minutes are forgotten.
  // Thread-safe.
  std::optional<nlohmann::json> Latest(const std::string& key, const PodView& pod);

  // Polls running now (for tests and metrics).
  int in_flight() const;
  // Polls started since the poller was made (for tests and metrics).
  uint64_t polls() const;

 private:
  struct Entry {
    std::optional<nlohmann::json> answer;
    bool polling = false;
    Clock::TimePoint asked;
    // When the last poll ended: the next starts a period later, so that the trainer sees two
    // reads at least a period apart however late a poll's thread started or its request
    // arrived (a loaded node delays one, not the next).
    std::optional<Clock::TimePoint> ended;
  };
  // On its own thread (the arguments are its copies).
  void Poll(const std::string& key, const std::string& entry, const PodView& pod);

  const Fetch fetch_;
  const Requeue requeue_;
  const int max_in_flight_;
  const std::chrono::milliseconds period_;
  Clock* const clock_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::map<std::string, Entry> entries_;  // "<key>/<pod>@<ip>:<port>"
  int in_flight_ = 0;
  uint64_t polls_ = 0;
};

}  // namespace tj::controller
