// Creates in parallel batches that grow while they succeed: the "slow start" of Kubernetes'
// Job controller (slowStartBatch). A job's pods go to the API server together rather than one
// round trip after another, so a reconcile of a 4-worker job takes two round trips (its Service
// and Secret, then its pods) instead of six; a create that fails (a quota, an admission
// webhook) costs one small batch of failed requests, not one per pod.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "common/status.h"

namespace tj::controller {

// The first batch of pods: a typical job's workers at once.
inline constexpr size_t kFirstPodBatch = 4;

// At most this many of a batch's tasks run at once: a 1000-worker job's batch of 512 pods is
// sent by 16 threads over 16 connections, not 512 of each. 16 round trips in flight keep
// the API server busy (its default --max-mutating-requests-inflight is 200 for all clients).
inline constexpr size_t kMaxParallelCreates = 16;

// Runs `tasks` in batches of `first_batch`, then twice as many after each batch in which every
// task succeeded. A batch's tasks run concurrently, at most `max_parallel` at a time (the
// calling thread runs some of them), and the batch ends when all have run. After a failure no
// further task starts: returns the first failure (in task order), or Ok. `first_batch` 0 means
// all in one batch.
Status RunSlowStart(const std::vector<std::function<Status()>>& tasks, size_t first_batch,
                    size_t max_parallel = kMaxParallelCreates);

}  // namespace tj::controller
