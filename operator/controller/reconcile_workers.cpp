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

void Work(kube::WorkQueue* queue, Executor* executor, OperatorMetrics* metrics, EventLog* log,
          const std::atomic<bool>* leading) {
  while (true) {
    auto key = queue->Get();
    if (!key) return;
    if (!leading->load()) {
      queue->Done(*key);
      queue->AddAfter(*key, std::chrono::seconds(1));
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto r = SyncOnce(executor, *key);
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

std::vector<std::jthread> StartReconcileWorkers(int count, kube::WorkQueue* queue,
                                                Executor* executor, OperatorMetrics* metrics,
                                                EventLog* log, const std::atomic<bool>* leading) {
  std::vector<std::jthread> threads;
  threads.reserve(count);
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([=] { Work(queue, executor, metrics, log, leading); });
  }
  return threads;
}

}  // namespace tj::controller
