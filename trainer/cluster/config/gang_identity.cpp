#include "trainer/cluster/config/gang_identity.h"

namespace tj::cluster {

Status RequireJobKey(const GangIdentity& identity, std::string_view who) {
  if (!identity.job_key.empty()) return Status::Ok();
  return Status::Error(StatusCode::kPermissionDenied,
                       std::string(who) +
                           ": TJ_RENDEZVOUS_KEY is empty; the rendezvous requires the job's "
                           "key on every task (the operator sets it from the Secret "
                           "<job>-rendezvous-<uid>; by hand, give every task the same key)");
}

}  // namespace tj::cluster
