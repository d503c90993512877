// A rate-limited work queue of keys ("namespace/name"), with client-go's semantics:
//  - a key is queued at most once however often it is added (de-duplication);
//  - a key handed out by Get() is never handed to a second worker before Done(); if it is
//    added meanwhile, it is queued again at Done();
//  - AddAfter() delays a key, AddRateLimited() delays it by its per-item exponential backoff
//    (5 ms * 2^failures, at most 1000 s) until Forget();
//  - AddWhenIdle() queues a key behind all other work (ours, not client-go's): it is handed out
//    only while no key is queued and none is being processed other than such idle keys, or
//    once its latest time has come. The Job controller defers its status writes this way
//    while a burst of creates is under way (operator/controller/executor.h).
// Time comes from a tj::Clock (delays are measured on it; Get() re-checks delayed keys at
// least every 20 ms of real time, so a FakeClock works too). Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "common/clock.h"
#include "common/histogram.h"
#include "common/thread_annotations.h"
#include "kube/backoff.h"

namespace tj::kube {

class WorkQueue {
 public:
  // Per-key backoff from `base_delay` doubling up to `max_delay`.
  explicit WorkQueue(Clock* clock, Clock::Duration base_delay = std::chrono::milliseconds(5),
                     Clock::Duration max_delay = std::chrono::seconds(1000));

  void Add(const std::string& key);
  void AddAfter(const std::string& key, Clock::Duration delay);
  void AddRateLimited(const std::string& key);
  // Queues `key` behind all other work, at the latest `max_delay` from now (then it is queued
  // like Add). An Add of the key meanwhile supersedes it; a key already queued stays so.
  void AddWhenIdle(const std::string& key, Clock::Duration max_delay);
  void Forget(const std::string& key);  // reset the key's backoff
  int NumRequeues(const std::string& key) const;

  // Blocks until a key is ready; nullopt once ShutDown() was called and nothing is queued.
  std::optional<std::string> Get();
  // Returns a ready key, or nullopt at once.
  std::optional<std::string> TryGet();
  void Done(const std::string& key);

  // Get() returns nullopt from now on once the queue is empty; adds are ignored.
  void ShutDown();
  bool ShuttingDown() const;

  size_t Len() const;            // keys ready to be handed out (workqueue_depth)
  size_t NumDelayed() const;     // keys waiting for their time
  size_t NumProcessing() const;  // keys handed out by Get() and not yet Done()
  size_t NumIdle() const;        // keys queued by AddWhenIdle() and not yet handed out
  // Whether any work other than `key`'s own is queued or being processed (keys handed out
  // from the idle tier do not count): what AddWhenIdle() keys wait for.
  bool BusyBesides(const std::string& key) const;
  uint64_t adds() const;     // workqueue_adds_total
  uint64_t retries() const;  // workqueue_retries_total
  // How long keys waited between their add and Get() (keys added by AddWhenIdle() are left
  // out: they wait on purpose), and how long from Get() to Done(); client-go's
  // workqueue_queue_duration_seconds and workqueue_work_duration_seconds.
  HistogramSnapshot queue_duration() const { return queue_duration_.Snapshot(); }
  HistogramSnapshot work_duration() const { return work_duration_.Snapshot(); }

 private:
  void AddLocked(const std::string& key) TJ_REQUIRES(mu_);
  // Puts `key` into `due` (waiting_ or idle_) for now + delay, the earlier time winning; at
  // once (AddLocked) when delay is not positive.
  void ScheduleLocked(std::map<std::string, Clock::TimePoint>* due, const std::string& key,
                      Clock::Duration delay) TJ_REQUIRES(mu_);
  void PromoteReadyLocked() TJ_REQUIRES(mu_);
  std::optional<std::string> PopLocked() TJ_REQUIRES(mu_);
  std::optional<std::string> PopIdleLocked() TJ_REQUIRES(mu_);
  double SecondsSince(Clock::TimePoint t) const;

  Clock* clock_;
  ItemExponentialBackoff backoff_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::string> queue_ TJ_GUARDED_BY(mu_);
  std::set<std::string> dirty_ TJ_GUARDED_BY(mu_);  // queued or to re-queue
  std::set<std::string> processing_ TJ_GUARDED_BY(mu_);
  std::map<std::string, Clock::TimePoint> waiting_ TJ_GUARDED_BY(mu_);  // key -> ready at
  std::map<std::string, Clock::TimePoint> idle_ TJ_GUARDED_BY(mu_);     // key -> queued by then
  std::set<std::string> processing_idle_ TJ_GUARDED_BY(mu_);            // handed out from idle_
  bool shutting_down_ TJ_GUARDED_BY(mu_) = false;
  uint64_t adds_ TJ_GUARDED_BY(mu_) = 0;
  uint64_t retries_ TJ_GUARDED_BY(mu_) = 0;
  std::map<std::string, Clock::TimePoint> queued_at_ TJ_GUARDED_BY(mu_);   // first add
  std::map<std::string, Clock::TimePoint> started_at_ TJ_GUARDED_BY(mu_);  // Get()
  Histogram queue_duration_, work_duration_;
};

}  // namespace tj::kube
