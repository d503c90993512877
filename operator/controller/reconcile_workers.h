// The operator's reconcile loop: threads that take keys from the work queue and sync them
// through the executor, requeueing as the result says (rate-limited after an error, after a
// delay when asked), as controller-runtime's workers do. While this instance does not lead,
// keys are put back for a second later. An exception out of a pass is an error for that key
// (logged, requeued with backoff), never the end of a worker.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/event_log.h"
#include "common/thread_annotations.h"
#include "kube/work_queue.h"
#include "operator/controller/executor.h"
#include "operator/controller/metrics.h"

namespace tj::controller {

// The pass each worker has in flight (its key and when it began), for the liveness probe. Every
// request of a pass has a timeout, so a pass that runs for minutes means a stuck worker (a
// deadlock, a call without a deadline): /healthz then fails, and the kubelet restarts the
// operator, which lists everything again and carries on. Thread-safe.
class WorkerPasses {
 public:
  using Clock = std::chrono::steady_clock;
  struct Pass {
    std::string key;
    Clock::duration age;
  };

  explicit WorkerPasses(int workers) : began_(static_cast<size_t>(workers)) {}
  void Begin(int worker, const std::string& key, Clock::time_point now = Clock::now());
  void End(int worker);
  // The oldest pass in flight at `now`; nullopt when every worker is idle.
  std::optional<Pass> Oldest(Clock::time_point now = Clock::now()) const;

 private:
  mutable Mutex mu_;
  std::vector<std::optional<std::pair<std::string, Clock::time_point>>> began_ TJ_GUARDED_BY(mu_);
};

// How long one pass may run before /healthz calls the operator stuck: far above the longest a
// healthy pass can take (a few API calls of at most 30 s each, status reads of 1.5 s).
inline constexpr std::chrono::minutes kMaxPassDuration{5};

// Why the operator is not live ("reconcile worker stuck for 312 s in one pass of ns/job"), or
// "" when no pass in flight is older than `limit`.
std::string StuckWorker(const WorkerPasses& passes, std::chrono::steady_clock::duration limit,
                        WorkerPasses::Clock::time_point now = WorkerPasses::Clock::now());

// Starts `count` workers; they end once the queue is shut down (joined on destruction). The
// pointers must outlive the returned threads; `passes` (may be null) has room for `count`.
std::vector<std::jthread> StartReconcileWorkers(int count, kube::WorkQueue* queue,
                                                Executor* executor, OperatorMetrics* metrics,
                                                EventLog* log, const std::atomic<bool>* leading,
                                                WorkerPasses* passes = nullptr);

}  // namespace tj::controller
