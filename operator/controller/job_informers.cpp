#include "operator/controller/job_informers.h"

#include <vector>

#include "kube/object_meta.h"
#include "kube/server_version.h"
#include "operator/api/training_job.h"
#include "operator/controller/cache_transforms.h"
#include "operator/controller/kueue_admission.h"
#include "operator/controller/pod_view.h"

namespace tj::controller {

using nlohmann::json;

namespace {

// Queues the job named by an object's kLabelJobName label, in the object's namespace.
void EnqueueLabelledJob(kube::WorkQueue* queue, const json& obj) {
  const json& m = obj["metadata"];
  if (!m.contains("labels") || !m["labels"].contains(api::kLabelJobName)) return;
  queue->Add(kube::ObjectKey(m.value("namespace", ""), m["labels"].value(api::kLabelJobName, "")));
}

}  // namespace

JobInformers MakeJobInformers(kube::Client* client, Clock* clock, const std::string& ns,
                              kube::WorkQueue* queue, EventLog* log,
                              ReportedBackups* reported_backups, DepartedPods* departed,
                              bool network_policies) {
  JobInformers out;
  auto enqueue_job = [queue](const json& obj) { queue->Add(kube::ObjectKey(obj)); };
  auto enqueue_owner = [queue](const json& obj) { EnqueueLabelledJob(queue, obj); };
  {
    kube::InformerOptions o;
    o.resource = api::kTrainingJobs;
    o.ns = ns;
    o.resync_period = std::chrono::minutes(10);
    // Templates as text: a cache of many large jobs costs their size, not 9 times it.
    o.transform = CompactTrainingJob;
    out.jobs = std::make_unique<kube::Informer>(client, clock, o, log);
    out.jobs->AddHandlers({enqueue_job,
                           [=](const json& old_obj, const json& n) {
                             if (!OnlyVersionChanged(old_obj, n)) enqueue_job(n);
                           },
                           enqueue_job});
  }
  std::vector<kube::Resource> owned = {kube::resources::kPods, kube::resources::kServices};
  if (network_policies) owned.push_back(kube::resources::kNetworkPolicies);
  for (const auto& r : owned) {
    kube::InformerOptions o;
    o.resource = r;
    o.ns = ns;
    o.label_selector = api::kLabelJobName;
    const bool pods = r.plural == kube::resources::kPods.plural;
    // Of a pod the reconciler reads a few fields, of the Service and the NetworkPolicy their
    // existence; of what wears a job's label without being a TrainingJob's (a user's pod,
    // another controller's), nothing.
    o.keep = OwnedByATrainingJob;
    o.transform = pods ? TrimPodForCache : KeepIdentity;
    auto inf = std::make_unique<kube::Informer>(client, clock, o, log);
    if (pods) {
      inf->cache().AddIndex(kPodNodeIndex, [](const json& pod) {
        const std::string node = NodeNameOf(pod);
        return node.empty() ? std::vector<std::string>{} : std::vector<std::string>{node};
      });
    }
    auto note = [=](const json& pod) {
      if (pods && reported_backups != nullptr) reported_backups->Note(pod);
    };
    inf->AddHandlers({enqueue_owner,
                      [=](const json& old_obj, const json& n) {
                        // E.g. the scheduler's PodScheduled condition: nothing to do.
                        const bool idle = pods ? OnlyVersionOrConditionsChanged(old_obj, n)
                                               : OnlyVersionChanged(old_obj, n);
                        if (!idle) {
                          note(n);
                          enqueue_owner(n);
                        }
                      },
                      [=](const json& last) {
                        note(last);
                        if (pods && departed != nullptr) departed->Note(last);
                        enqueue_owner(last);
                      }});
    if (pods) {
      out.pods = std::move(inf);
    } else if (r.plural == kube::resources::kServices.plural) {
      out.services = std::move(inf);
    } else {
      out.network_policies = std::move(inf);
    }
  }
  return out;
}

StatusOr<Watchability> Watchable(kube::Client& client,
                                 const std::vector<const kube::Resource*>& resources,
                                 const std::string& ns) {
  for (const kube::Resource* r : resources) {
    const std::string what = r->plural + "." + r->api_version;
    // Discovery first: a list of what the server does not serve would still be authorized
    // and logged (a 403 where the chart grants nothing of Kueue's).
    auto served = kube::Serves(client, *r);
    if (!served.ok()) return served.status();
    if (!*served) return Watchability{false, false, "the API server serves no " + what};
    const std::string where = r->namespaced ? ns : "";
    auto got = client.Raw("GET", r->Path(where) + "?limit=1");
    if (got.ok()) continue;
    const kube::ApiError& e = got.error();
    if (kube::IsNotFound(e)) return Watchability{false, false, "the API server serves no " + what};
    if (e.code == 403) return Watchability{false, true, "the operator may not list " + what};
    return e.ToStatus().WithContext("listing " + what);
  }
  return Watchability{true, true, ""};
}

namespace {

// An informer on `r` in `ns` (a cluster-scoped one everywhere), objects without managedFields.
std::unique_ptr<kube::Informer> MakeInformer(const kube::Resource& r, const std::string& selector,
                                             kube::Client* client, Clock* clock,
                                             const std::string& ns, EventLog* log) {
  kube::InformerOptions o;
  o.resource = r;
  o.ns = r.namespaced ? ns : "";
  o.label_selector = selector;
  o.transform = kube::StripManagedFields;
  return std::make_unique<kube::Informer>(client, clock, o, log);
}

}  // namespace

void AddKueueInformers(JobInformers* informers, kube::Client* client, Clock* clock,
                       const std::string& ns, kube::WorkQueue* queue, EventLog* log) {
  auto make = [&](const kube::Resource& r, const std::string& selector) {
    return MakeInformer(r, selector, client, clock, ns, log);
  };
  informers->workloads = make(kueue::kWorkloads, api::kLabelJobName);
  auto enqueue = [queue](const json& obj) { EnqueueLabelledJob(queue, obj); };
  informers->workloads->AddHandlers({enqueue,
                                     [=](const json& old_obj, const json& n) {
                                       if (!OnlyVersionChanged(old_obj, n)) enqueue(n);
                                     },
                                     enqueue});
  // A flavor or a priority class is read when a job is admitted or its Workload made: a
  // change to one reaches the jobs admitted after it, as with live reads.
  informers->flavors = make(kueue::kResourceFlavors, "");
  informers->priority_classes = make(kueue::kWorkloadPriorityClasses, "");
}

void AddNodeInformer(JobInformers* informers, kube::Client* client, Clock* clock,
                     kube::WorkQueue* queue, EventLog* log) {
  kube::InformerOptions o;
  o.resource = kube::resources::kNodes;
  o.transform = TrimNodeForCache;
  informers->nodes = std::make_unique<kube::Informer>(client, clock, o, log);
  IndexNodesForInPlace(informers->nodes->cache());
  const kube::ObjectCache* pods = &informers->pods->cache();
  auto enqueue_jobs_on = [queue, pods](const json& node) {
    for (const json& pod :
         pods->ByIndex(kPodNodeIndex, kube::TextOf(kube::MetadataOf(node), "name"))) {
      EnqueueLabelledJob(queue, pod);
    }
  };
  informers->nodes->AddHandlers({enqueue_jobs_on,
                                 [=](const json& old_obj, const json& n) {
                                   if (!OnlyVersionChanged(old_obj, n)) enqueue_jobs_on(n);
                                 },
                                 enqueue_jobs_on});
}

void AddPodGroupInformer(JobInformers* informers, gang::Kind kind, kube::Client* client,
                         Clock* clock, const std::string& ns, EventLog* log) {
  informers->pod_groups[static_cast<size_t>(kind)] =
      MakeInformer(gang::ResourceOf(kind), api::kLabelJobName, client, clock, ns, log);
}

}  // namespace tj::controller
