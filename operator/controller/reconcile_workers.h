// The operator's reconcile loop: threads that take keys from the work queue and sync them
// through the executor, requeueing as the result says (rate-limited after an error, after a
// delay when asked), as controller-runtime's workers do. While this instance does not lead,
// keys are put back for a second later. An exception out of a pass is an error for that key
// (logged, requeued with backoff), never the end of a worker.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

#include "common/event_log.h"
#include "operator/controller/executor.h"
#include "operator/controller/metrics.h"
#include "operator/kube/work_queue.h"

namespace tj::controller {

// Starts `count` workers; they end once the queue is shut down (joined on destruction). The
// pointers must outlive the returned threads.
std::vector<std::jthread> StartReconcileWorkers(int count, kube::WorkQueue* queue,
                                                Executor* executor, OperatorMetrics* metrics,
                                                EventLog* log, const std::atomic<bool>* leading);

}  // namespace tj::controller
