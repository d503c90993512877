// The trainers' /status polls, off the reconcile workers. A chief that never answers (behind a
// default-deny NetworkPolicy, or a program that accepts and stays silent) costs a poll its
// whole timeout; asked inside a reconcile pass, a dozen of them held every worker and stalled
// every tenant's jobs. Here a pass only reads the last answer and asks for a fresh one; the
// polls run on threads of their own, at most `max_in_flight` at once, each bounded in time by
// the fetch (ReadTrainerStatus: 1.5 s), and a new answer requeues its job.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "operator/controller/pod_view.h"

namespace tj::controller {

class TrainerStatusPoller {
 public:
  // `fetch` asks one pod (bounded in time; called on the poller's threads); `requeue` asks
  // for a pass of a job ("namespace/name"), called on the poller's threads when a poll's
  // answer differs from the one before.
  using Fetch = std::function<std::optional<nlohmann::json>(const PodView& pod)>;
  using Requeue = std::function<void(const std::string& key)>;
  TrainerStatusPoller(Fetch fetch, Requeue requeue, int max_in_flight);
  // Waits for the polls in flight (each bounded by the fetch's timeout).
  ~TrainerStatusPoller();
  TrainerStatusPoller(const TrainerStatusPoller&) = delete;
  TrainerStatusPoller& operator=(const TrainerStatusPoller&) = delete;

  // Never blocks on the network: the last answer of `pod` (of job `key`, at its current IP)
  // if one came, and a poll of it started, unless one is in flight already or max_in_flight
  // are (then the next pass asks again). Answers not asked for in 10 minutes are forgotten.
  // Thread-safe.
  std::optional<nlohmann::json> Latest(const std::string& key, const PodView& pod);

  // Polls running now (for tests and metrics).
  int in_flight() const;

 private:
  struct Entry {
    std::optional<nlohmann::json> answer;
    bool polling = false;
    std::chrono::steady_clock::time_point asked;
  };
  // On its own thread (the arguments are its copies).
  void Poll(const std::string& key, const std::string& entry, const PodView& pod);

  const Fetch fetch_;
  const Requeue requeue_;
  const int max_in_flight_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::map<std::string, Entry> entries_;  // "<key>/<pod>@<ip>:<port>"
  int in_flight_ = 0;
};

}  // namespace tj::controller
