// The operator's informers: TrainingJobs, and the pods and Services labelled with a job's
// name and owned by a TrainingJob (others never enter the caches). Every event that matters
// enqueues the job's key; events that change nothing the reconciler reads (a resourceVersion, a
// pod's scheduling condition) do not. No informer on Secrets: the operator creates the rendezvous
// Secret and never reads one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/event_log.h"
#include "kube/informer.h"
#include "kube/work_queue.h"
#include "operator/controller/departed_pods.h"
#include "operator/controller/executor.h"
#include "operator/controller/reported_backups.h"

namespace tj::controller {

struct JobInformers {
  std::unique_ptr<kube::Informer> jobs, pods, services;

  OwnedObjectCaches Caches() const { return {&jobs->cache(), &pods->cache(), &services->cache()}; }
  std::vector<kube::Informer*> All() const { return {jobs.get(), pods.get(), services.get()}; }
};

// Informers on `ns` ("" for all namespaces) feeding `queue`; not started. The pod events also
// go to `reported_backups` (may be null). The pointers must outlive them.
JobInformers MakeJobInformers(kube::Client* client, Clock* clock, const std::string& ns,
                              kube::WorkQueue* queue, EventLog* log,
                              ReportedBackups* reported_backups = nullptr,
                              DepartedPods* departed = nullptr);

}  // namespace tj::controller
