// The gang's PodGroup (gang_scheduling.h): one per gang, made in the pass that creates the
// gang's pods, before them (the decision's creates run the PodGroup first, and a pod is not
// created when its group could not be), and the job's groups of earlier gangs deleted. Existing
// groups are read from Observed::pod_groups where the operator watches the kind; where it does
// not, the create's AlreadyExists is checked by the executor (a group the job does not own
// fails the pass) and the previous gang's group is deleted by name. Part of the reconcile pass
// (reconciler_pass.h).
#include <string>

#include "kube/object_meta.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler_pass.h"

namespace tj::controller::reconcile {

namespace {

// The restart-count label of a PodGroup as a gang number; nullopt when it is not one.
std::optional<int> GangOf(const nlohmann::json& group) {
  const std::string n = kube::LabelOf(group, api::kLabelRestartCount);
  if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoi(n);
}

}  // namespace

bool Pass::GroupTheGang(int number) {
  const std::optional<gang::Kind> kind = gang::KindFor(spec_, options_.native_pod_groups);
  if (!kind) return true;
  const kube::Resource& resource = gang::ResourceOf(*kind);
  const std::string name = gang::PodGroupName(ref_.name, number);
  const auto watched = observed_.pod_groups.find(resource.api_version);
  bool exists = false;
  if (watched != observed_.pod_groups.end()) {
    for (const json& g : watched->second) {
      if (api::RefOf(g).name != name) continue;
      if (!IsOwnedBy(g, observed_.job)) {
        const std::string what =
            resource.plural + "." + resource.api_version + " " + ref_.ns + "/" + name;
        Event("Warning", "PodGroupFailed",
              what +
                  " exists and this job does not own it: delete it, or give the job another "
                  "name; the gang's pods are not created until then");
        RequeueAfter(std::chrono::seconds(10));
        return false;
      }
      exists = true;
    }
  }
  if (!exists) {
    Create(resource, gang::BuildPodGroup(*kind, observed_.job, spec_, number));
    decision_.actions.back().hint =
        " (the cluster must serve " + resource.api_version + " " + resource.plural +
        ": install that scheduler, or set spec.runPolicy.schedulingPolicy.gang to None or Auto; "
        "the operator's ClusterRole needs create, get, list, watch and delete on them, which "
        "the Helm chart grants)";
  }
  gang_group_ = {*kind, name};
  if (number == 0) return true;
  if (watched == observed_.pod_groups.end()) {  // not watched: the previous gang's, by name
    Delete(resource, gang::PodGroupName(ref_.name, number - 1));
    return true;
  }
  for (const json& g : watched->second) {
    const std::optional<int> gang = GangOf(g);
    if (IsOwnedBy(g, observed_.job) && !kube::IsBeingDeleted(g) && gang && *gang < number) {
      Delete(resource, api::RefOf(g).name);
    }
  }
  return true;
}

}  // namespace tj::controller::reconcile
