#include "operator/controller/restart_cause.h"

#include <string>

#include "operator/kube/object_meta.h"

namespace tj::controller {
namespace {

using api::RestartCause;
using nlohmann::json;

std::string Text(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The reason of a True DisruptionTarget condition (Kubernetes 1.26+), empty when none.
std::string DisruptionReason(const json& status) {
  auto conditions = status.find("conditions");
  if (conditions == status.end() || !conditions->is_array()) return "";
  for (const json& c : *conditions) {
    if (c.is_object() && Text(c, "type") == "DisruptionTarget" && Text(c, "status") == "True") {
      return Text(c, "reason");
    }
  }
  return "";
}

}  // namespace

RestartCause ClassifyRestartCause(const json& pod) {
  if (!pod.is_object()) return RestartCause::kDeleted;
  const json no_status = json::object();
  auto st = pod.find("status");
  const json& status = st != pod.end() && st->is_object() ? *st : no_status;
  // status.reason: set by the kubelet (node-pressure eviction, graceful node shutdown) and
  // the node lifecycle controller.
  const std::string reason = Text(status, "reason");
  if (reason == "Evicted") return RestartCause::kEvicted;
  if (reason == "Preempting") return RestartCause::kPreempted;
  if (reason == "Shutdown" || reason == "NodeShutdown" || reason == "Terminated" ||
      reason == "NodeLost") {
    return RestartCause::kNodeLost;
  }
  // DisruptionTarget: who is about to delete the pod (Kubernetes 1.26+).
  const std::string disruption = DisruptionReason(status);
  if (disruption == "EvictionByEvictionAPI") return RestartCause::kEvicted;
  if (disruption == "PreemptionByScheduler" || disruption == "PreemptionByKubeScheduler") {
    return RestartCause::kPreempted;
  }
  if (disruption == "DeletionByTaintManager" || disruption == "DeletionByPodGC" ||
      disruption == "TerminationByKubelet") {
    return RestartCause::kNodeLost;
  }
  // Deleted (by a user, a drain on a cluster without DisruptionTarget): whatever the program
  // exited with afterwards answered the deletion's SIGTERM.
  if (kube::IsBeingDeleted(pod)) return RestartCause::kDeleted;
  return RestartCause::kFailed;
}

int RootCauseRank(RestartCause cause, bool lost_a_peer) {
  if (cause == RestartCause::kFailed) return lost_a_peer ? 2 : 0;
  return 1;
}

}  // namespace tj::controller
