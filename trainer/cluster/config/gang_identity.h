// Which job, and which gang of it, a trainer process belongs to, as the operator tells each
// pod: the job's UID (TJ_JOB_UID), the job's key (TJ_RENDEZVOUS_KEY, made once per job and
// kept in its Secret) and the gang's number (TJ_RESTART_COUNT, the job's restartCount when the
// pod was made). One value from main() to every place that needs it: the rendezvous and the
// links between tasks prove the key for this gang, backups live under the UID and are fenced
// by the gang, checkpoints are signed with the key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tj::cluster {

struct GangIdentity {
  // The job's Kubernetes UID; empty when unset (a run by hand: backups live in the directory
  // as given).
  std::string job_uid{};
  // The gang's number (0, 1, ...); -1 when unset (a run by hand: every task the same, no
  // fencing of backups).
  int64_t gang = -1;
  // The job's key: required by every collective of more than one process (by hand, give every
  // task the same one); backups and checkpoints are signed with it (empty: integrity only).
  std::string job_key{};
};

// Ok when the identity has a job key; else kPermissionDenied, naming `who` needs it and where
// it comes from. Nothing joins a gang without the key: no fail-open.
Status RequireJobKey(const GangIdentity& identity, std::string_view who);

}  // namespace tj::cluster
