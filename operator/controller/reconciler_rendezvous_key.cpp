// The rendezvous key: the Secret the job's pods read it from, made by the operator (which never
// reads Secrets: what it knows of the one it made is status.rendezvousKeyHash and the hash each
// pod carries), made again when it goes missing, and the whole gang restarted when pods hold
// another key than the Secret's. Part of the reconcile pass (reconciler_pass.h).
#include <string>
#include <vector>

#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler_pass.h"

namespace tj::controller::reconcile {

namespace cond = api::condition;

std::string Pass::HashThePodsAgreeOn() const {
  std::string agreed;
  for (const auto& p : pods_) {
    const std::string& h = p.key_hash;
    if (h.empty()) continue;
    if (!agreed.empty() && h != agreed) return "";
    agreed = h;
  }
  return agreed;
}

void Pass::EnsureSecret() {
  // A pass that made the Secret and its pods but whose status was never written (an operator
  // that stopped in between): the pods say which key it made.
  if (status_.rendezvous_key_hash.empty()) status_.rendezvous_key_hash = HashThePodsAgreeOn();
  const bool made = !status_.rendezvous_key_hash.empty();
  const std::string missing_in = made ? SecretMissingPod() : "";
  // Operators before the Secret's name carried the job's UID set RendezvousSecretConflict on
  // a Secret of the job's name they had not made; no such Secret exists now, nor the condition.
  std::erase_if(status_.conditions,
                [](const api::Condition& c) { return c.type == cond::kRendezvousSecretConflict; });
  if (made && missing_in.empty()) {
    key_hash_ = status_.rendezvous_key_hash;
    return;
  }
  if (observed_.new_rendezvous_key.empty()) return;
  Create(kube::resources::kSecrets, BuildSecret(observed_.job, observed_.new_rendezvous_key));
  key_hash_ = KeyHash(observed_.new_rendezvous_key);
  status_.rendezvous_key_hash = key_hash_;
  if (!missing_in.empty()) {
    Event("Warning", "RendezvousSecretMissing",
          "Secret " + SecretName(ref_) + " was deleted (" + missing_in +
              " cannot start without it); creating it again with a new key");
  }
}

std::string Pass::SecretMissingPod() const {
  // The kubelet's words for a Secret that is not there (`secret "x" not found`; the API
  // server's `secrets "x" not found`), naming exactly ours: a ConfigMap of that name, or a
  // message that merely quotes it, is not our Secret missing.
  const std::string quoted = "\"" + SecretName(ref_) + "\" not found";
  for (const auto& p : pods_) {
    if (!p.Active()) continue;
    for (const WaitingContainer& w : p.waiting) {
      if (w.reason != "CreateContainerConfigError") continue;
      if (w.message.find("secret " + quoted) != std::string::npos ||
          w.message.find("secrets " + quoted) != std::string::npos) {
        return p.name;
      }
    }
  }
  return "";
}

std::string Pass::PodWithAnotherKey(const GangPods& current) const {
  const std::string& key = key_hash_;
  if (key.empty()) return "";
  // A gang of which a member has finished has trained: it is not started again for a key.
  for (const auto& [k, p] : current) {
    if (p->phase == "Succeeded") return "";
  }
  for (const auto& [k, p] : current) {
    const std::string& held = p->key_hash;
    if (held.empty() || held == key || !p->Active()) continue;
    return p->name;
  }
  return "";
}

bool Pass::RestartForANewKey(const Gang& gang) {
  // A new rendezvous key (the Secret was deleted and made again): pods that hold the old one
  // cannot rendezvous with those that read the new one, so the whole gang starts again. Not
  // the job's failure: by default backoffLimit does not stop it.
  const std::string pod = PodWithAnotherKey(gang.current);
  if (pod.empty()) return false;
  const std::string why = "the rendezvous key in Secret " + SecretName(ref_) + " changed (" + pod +
                          " was started with another)";
  auto budget = ChargeGangRestart(api::RestartCause::kOperatorRestart, why);
  if (!budget) return true;  // a failure policy rule fails the job on it
  RestartGang("restart " + std::to_string(status_.restart_count + 1) + " (" + *budget +
                  "): " + why + "; restarting all chief and worker pods",
              gang.current);
  return true;
}

}  // namespace tj::controller::reconcile
