// The job's NetworkPolicy (network_policy.h): made with the job's Service and Secret, made
// again when it goes. A refusal never stops the job: the pass after it (Observed::refused)
// says it in the condition NetworkPolicyRefused, and the job's passes wait
// ReconcilerOptions::network_policy_retry from then before they ask again. Part of the
// reconcile pass (reconciler_pass.h).
#include <string>

#include "operator/controller/network_policy.h"
#include "operator/controller/reconciler_pass.h"

namespace tj::controller::reconcile {

namespace cond = api::condition;

void Pass::EnsureNetworkPolicy() {
  if (!options_.network_policy) {
    // A refusal said while the operator made policies holds no more once it makes none (only
    // written where it was True).
    status_.SetCondition(cond::kNetworkPolicyRefused, false, "NetworkPolicyOff",
                         "the operator makes no NetworkPolicies (it runs without "
                         "--network-policy)",
                         observed_.now);
    return;
  }
  const std::string name = NetworkPolicyName(ref_.name);
  if (observed_.network_policy) {
    // Written only where it was ever True (SetCondition keeps a condition that never held
    // out of the status).
    status_.SetCondition(cond::kNetworkPolicyRefused, false, "NetworkPolicyCreated",
                         "NetworkPolicy " + name + " admits to the job's pods only the job's " +
                             "own pods and the operator (where the cluster's network plugin " +
                             "enforces NetworkPolicies)",
                         observed_.now);
    return;
  }
  if (auto r = observed_.refused.find(kube::resources::kNetworkPolicies.plural);
      r != observed_.refused.end()) {
    SayNetworkPolicyRefused(r->second);
    return;
  }
  if (const api::Condition* c = status_.Find(cond::kNetworkPolicyRefused);
      c != nullptr && c->status == "True") {
    const auto refused_at = kube::ParseTime(c->last_update_time);
    if (refused_at && observed_.now < *refused_at + options_.network_policy_retry) {
      RequeueAt(*refused_at + options_.network_policy_retry);
      return;
    }
  }
  Create(kube::resources::kNetworkPolicies,
         BuildNetworkPolicy(observed_.job, spec_, *options_.network_policy));
}

void Pass::SayNetworkPolicyRefused(const Refusal& refusal) {
  const auto retry =
      std::chrono::duration_cast<std::chrono::seconds>(options_.network_policy_retry);
  const std::string message =
      refusal.message +
      "; the job runs, but its pods are not isolated: any pod that can reach them may connect "
      "to their ports (each trainer port still admits only peers holding the job's key). Let "
      "the operator create networkpolicies in this namespace (the chart's RBAC) or lift the "
      "refusal; tried again every " +
      std::to_string(retry.count()) + " s";
  if (status_.SetCondition(cond::kNetworkPolicyRefused, true, "NetworkPolicyRefused", message,
                           refusal.at)) {
    Event("Warning", "NetworkPolicyRefused", message);
  }
  // Stamped with the refusal even when it said so already: the retry waits from the last one.
  for (auto& c : status_.conditions) {
    if (c.type == cond::kNetworkPolicyRefused) c.last_update_time = kube::FormatTime(refusal.at);
  }
  RequeueAt(refusal.at + options_.network_policy_retry);
}

}  // namespace tj::controller::reconcile
