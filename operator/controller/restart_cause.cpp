#include "operator/controller/restart_cause.h"

#include <string>

namespace tj::controller {

using api::RestartCause;

RestartCause ClassifyRestartCause(const PodView& pod) {
  // status.reason: set by the kubelet (node-pressure eviction, graceful node shutdown) and
  // the node lifecycle controller.
  const std::string& reason = pod.reason;
  if (reason == "Evicted") return RestartCause::kEvicted;
  if (reason == "Preempting") return RestartCause::kPreempted;
  if (reason == "Shutdown" || reason == "NodeShutdown" || reason == "Terminated" ||
      reason == "NodeLost") {
    return RestartCause::kNodeLost;
  }
  // DisruptionTarget: who is about to delete the pod (Kubernetes 1.26+).
  const std::string& disruption = pod.disruption;
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
  if (pod.being_deleted) return RestartCause::kDeleted;
  return RestartCause::kFailed;
}

int RootCauseRank(RestartCause cause, bool lost_a_peer) {
  if (cause == RestartCause::kFailed) return lost_a_peer ? 2 : 0;
  return 1;
}

}  // namespace tj::controller
