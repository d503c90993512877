// The operator's informers: TrainingJobs, and the pods, Services and (when jobs get one)
// NetworkPolicies labelled with a job's name and owned by a TrainingJob (others never enter
// the caches); where the operator may list them, Kueue's objects, PodGroups and Nodes. Every
// event that matters enqueues the job's key; events that change nothing the reconciler reads
// (a resourceVersion, a pod's scheduling condition, a node's heartbeat) do not. No informer on
// Secrets: the operator creates the rendezvous Secret and never reads one.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/event_log.h"
#include "kube/informer.h"
#include "kube/work_queue.h"
#include "operator/controller/departed_pods.h"
#include "operator/controller/executor.h"
#include "operator/controller/gang_scheduling.h"
#include "operator/controller/reported_backups.h"

namespace tj::controller {

struct JobInformers {
  std::unique_ptr<kube::Informer> jobs, pods, services;
  std::unique_ptr<kube::Informer> network_policies;  // null unless asked for
  // Kueue's Workloads (those labelled with a job's name), ResourceFlavors and
  // WorkloadPriorityClasses: null unless AddKueueInformers made them.
  std::unique_ptr<kube::Informer> workloads, flavors, priority_classes;
  // The jobs' PodGroups of each kind (gang_scheduling.h), indexed by gang::Kind: null unless
  // AddPodGroupInformer made it.
  std::array<std::unique_ptr<kube::Informer>, std::size(gang::kKinds)> pod_groups;
  // The cluster's Nodes: null unless AddNodeInformer made it.
  std::unique_ptr<kube::Informer> nodes;

  OwnedObjectCaches Caches() const {
    return {&jobs->cache(), &pods->cache(), &services->cache(),
            network_policies ? &network_policies->cache() : nullptr};
  }
  KueueCaches Kueue() const {
    if (!workloads) return {};
    return {&workloads->cache(), &flavors->cache(), &priority_classes->cache()};
  }
  PodGroupCaches PodGroups() const {
    PodGroupCaches out;
    for (size_t k = 0; k < pod_groups.size(); ++k) {
      if (pod_groups[k]) out.by_kind[k] = &pod_groups[k]->cache();
    }
    return out;
  }
  std::vector<kube::Informer*> All() const {
    std::vector<kube::Informer*> all = {jobs.get(), pods.get(), services.get()};
    for (const auto* more : {&network_policies, &workloads, &flavors, &priority_classes, &nodes}) {
      if (*more) all.push_back(more->get());
    }
    for (const auto& i : pod_groups) {
      if (i) all.push_back(i.get());
    }
    return all;
  }
};

// The index of the pod cache by the node a pod is bound to (spec.nodeName; none when unbound).
inline constexpr char kPodNodeIndex[] = "node";

// Informers on `ns` ("" for all namespaces) feeding `queue`; not started. The pod events also
// go to `reported_backups` and `departed` (either may be null). `network_policies`: also the
// jobs' NetworkPolicies (a deleted one is made again). The pointers must outlive them.
JobInformers MakeJobInformers(kube::Client* client, Clock* clock, const std::string& ns,
                              kube::WorkQueue* queue, EventLog* log,
                              ReportedBackups* reported_backups = nullptr,
                              DepartedPods* departed = nullptr, bool network_policies = false);

// Whether the operator may watch each of `resources` in `ns` ("" for all namespaces; a
// cluster-scoped resource everywhere): each answers a list of one item. False, with the first
// reason, when one is not served (404) or may not be listed (403); an error only when the API
// server does not answer. Kueue's (Workloads, ResourceFlavors, WorkloadPriorityClasses: the
// Helm chart grants them with kueue.enabled=true) are read live where they are not watched, as
// are PodGroups.
struct Watchability {
  bool watchable = false;
  bool served = false;  // all of `resources` are served (listable or not)
  std::string why_not;
};
StatusOr<Watchability> Watchable(kube::Client& client,
                                 const std::vector<const kube::Resource*>& resources,
                                 const std::string& ns);

// Adds the Kueue informers to `informers` (not started): a Workload's change enqueues the job
// whose name it is labelled with, so a queued job learns of its admission at once.
void AddKueueInformers(JobInformers* informers, kube::Client* client, Clock* clock,
                       const std::string& ns, kube::WorkQueue* queue, EventLog* log);

// Adds an informer on the cluster's Nodes to `informers` (not started), kept as
// TrimNodeForCache trims them and indexed by IndexNodesForInPlace: a change of what the
// lost-node rules read of a node (its Ready condition, its taints) enqueues every job with a pod
// bound to it (the pod cache's kPodNodeIndex). Needs list and watch on nodes, cluster-wide.
void AddNodeInformer(JobInformers* informers, kube::Client* client, Clock* clock,
                     kube::WorkQueue* queue, EventLog* log);

// Adds an informer on the PodGroups of `kind` labelled with a job's name to `informers` (not
// started).
void AddPodGroupInformer(JobInformers* informers, gang::Kind kind, kube::Client* client,
                         Clock* clock, const std::string& ns, EventLog* log);

}  // namespace tj::controller
