#include "operator/controller/reconcile_workers.h"

#include <chrono>
#include <exception>
#include <string>

namespace tj::controller {
namespace {

// One pass, with an exception turned into an error: it requeues the key with backoff and ends
// neither the thread nor the operator (as controller-runtime recovers a reconciler's panic).
// Reads of what tenants send are written not to throw; this is the net under them.
StatusOr<std::optional<std::chrono::milliseconds>> SyncOnce(Executor* executor,
                                                            const std::string& key) {
  try {
    return executor->Sync(key);
  } catch (const std::exception& e) {
    return Status::Error(std::string("internal error (please report it): ") + e.what());
  }
}

void Work(int worker, kube::WorkQueue* queue, Executor* executor, OperatorMetrics* metrics,
          EventLog* log, const std::atomic<bool>* leading, WorkerPasses* passes) {
  while (true) {
    auto key = queue->Get();
    if (!key) return;
    if (!leading->load()) {
      queue->Done(*key);
      queue->AddAfter(*key, std::chrono::seconds(1));
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (passes != nullptr) passes->Begin(worker, *key, t0);
    auto r = SyncOnce(executor, *key);
    if (passes != nullptr) passes->End(worker);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.ok()) {
      log->Warn("reconciling " + *key + ": " + r.status().message());
      metrics->ReconcileDone("error", secs);
      queue->Done(*key);
      queue->AddRateLimited(*key);
      continue;
    }
    queue->Forget(*key);
    queue->Done(*key);
    if (*r) {
      metrics->ReconcileDone("requeue_after", secs);
      queue->AddAfter(*key, **r);
    } else {
      metrics->ReconcileDone("success", secs);
    }
  }
}

}  // namespace

void WorkerPasses::Begin(int worker, const std::string& key, Clock::time_point now) {
  MutexLock lock(mu_);
  began_.at(static_cast<size_t>(worker)) = std::make_pair(key, now);
}

void WorkerPasses::End(int worker) {
  MutexLock lock(mu_);
  began_.at(static_cast<size_t>(worker)).reset();
}

std::optional<WorkerPasses::Pass> WorkerPasses::Oldest(Clock::time_point now) const {
  MutexLock lock(mu_);
  std::optional<Pass> oldest;
  for (const auto& b : began_) {
    if (b && (!oldest || now - b->second > oldest->age)) oldest = Pass{b->first, now - b->second};
  }
  return oldest;
}

std::string StuckWorker(const WorkerPasses& passes, std::chrono::steady_clock::duration limit,
                        WorkerPasses::Clock::time_point now) {
  const auto oldest = passes.Oldest(now);
  if (!oldest || oldest->age <= limit) return "";
  return "a reconcile worker is stuck: one pass of " + oldest->key + " has run for " +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(oldest->age).count()) +
         " s (limit " +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(limit).count()) + " s)";
}

std::vector<std::jthread> StartReconcileWorkers(int count, kube::WorkQueue* queue,
                                                Executor* executor, OperatorMetrics* metrics,
                                                EventLog* log, const std::atomic<bool>* leading,
                                                WorkerPasses* passes) {
  std::vector<std::jthread> threads;
  threads.reserve(count);
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([=] { Work(i, queue, executor, metrics, log, leading, passes); });
  }
  return threads;
}

}  // namespace tj::controller
