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
  // Kueue's Workloads (those labelled with a job's name), ResourceFlavors and
  // WorkloadPriorityClasses: null unless AddKueueInformers made them.
  std::unique_ptr<kube::Informer> workloads, flavors, priority_classes;

  OwnedObjectCaches Caches() const {
    return {&jobs->cache(), &pods->cache(), &services->cache(),
            network_policies ? &network_policies->cache() : nullptr};
  }
  kueue::KueueCaches Kueue() const {
    if (!workloads) return {};
    return {&workloads->cache(), &flavors->cache(), &priority_classes->cache()};
  }
  std::vector<kube::Informer*> All() const {
    std::vector<kube::Informer*> all = {jobs.get(), pods.get(), services.get()};
    for (const auto* more : {&network_policies, &workloads, &flavors, &priority_classes}) {
      if (*more) all.push_back(more->get());
    }
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

// Whether the operator may watch Kueue's Workloads in `ns` ("" for all namespaces),
// ResourceFlavors and WorkloadPriorityClasses: each answers a list of one item. False, with
// the reason, when Kueue is not installed (404) or the operator may not list them (403: the
// Helm chart grants it with kueue.enabled=true); then queued jobs read them live.
struct KueueWatch {
  bool watchable = false;
  std::string why_not;
};
StatusOr<KueueWatch> KueueWatchable(kube::Client& client, const std::string& ns);

// Adds the Kueue informers to `informers` (not started): a Workload's change enqueues the job
// whose name it is labelled with, so a queued job learns of its admission at once.
void AddKueueInformers(JobInformers* informers, kube::Client* client, Clock* clock,
                       const std::string& ns, kube::WorkQueue* queue, EventLog* log);

}  // namespace tj::controller
