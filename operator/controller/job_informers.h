// The operator's informers: TrainingJobs, and the pods, Services and (when jobs get one)
// NetworkPolicies labelled with a job's name and owned by a TrainingJob (others never enter
// the caches). Every event that matters
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
  std::unique_ptr<kube::Informer> network_policies;  // null unless asked for

  OwnedObjectCaches Caches() const {
    return {&jobs->cache(), &pods->cache(), &services->cache(),
            network_policies ? &network_policies->cache() : nullptr};
  }
  std::vector<kube::Informer*> All() const {
    std::vector<kube::Informer*> all = {jobs.get(), pods.get(), services.get()};
    if (network_policies) all.push_back(network_policies.get());
    return all;
  }
};

// Informers on `ns` ("" for all namespaces) feeding `queue`; not started. The pod events also
// go to `reported_backups` and `departed` (either may be null). `network_policies`: also the
// jobs' NetworkPolicies (a deleted one is made again). The pointers must outlive them.
JobInformers MakeJobInformers(kube::Client* client, Clock* clock, const std::string& ns,
                              kube::WorkQueue* queue, EventLog* log,
                              ReportedBackups* reported_backups = nullptr,
                              DepartedPods* departed = nullptr, bool network_policies = false);

}  // namespace tj::controller
