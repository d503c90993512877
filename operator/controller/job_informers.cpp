#include "operator/controller/job_informers.h"

#include <vector>

#include "operator/api/training_job.h"
#include "operator/controller/cache_transforms.h"

namespace tj::controller {

using nlohmann::json;

JobInformers MakeJobInformers(kube::Client* client, Clock* clock, const std::string& ns,
                              kube::WorkQueue* queue, EventLog* log,
                              ReportedBackups* reported_backups, DepartedPods* departed,
                              bool network_policies) {
  JobInformers out;
  auto enqueue_job = [queue](const json& obj) { queue->Add(kube::ObjectKey(obj)); };
  auto enqueue_owner = [queue](const json& obj) {
    const json& m = obj["metadata"];
    if (!m.contains("labels") || !m["labels"].contains(api::kLabelJobName)) return;
    queue->Add(
        kube::ObjectKey(m.value("namespace", ""), m["labels"].value(api::kLabelJobName, "")));
  };
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

}  // namespace tj::controller
