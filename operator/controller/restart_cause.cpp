#include "operator/controller/restart_cause.h"

#include <optional>
#include <string>

namespace tj::controller {

using api::RestartCause;

namespace {

// status.reason, which the kubelet (node-pressure eviction, graceful node shutdown, a critical
// pod's preemption) and the node lifecycle controller set; the cause when the pod carries no
// DisruptionTarget condition (clusters before Kubernetes 1.26), and what tells the kubelet's
// terminations apart.
std::optional<RestartCause> CauseOfStatusReason(const std::string& reason) {
  if (reason == "Evicted") return RestartCause::kEvicted;
  if (reason == "Preempting") return RestartCause::kPreempted;
  if (reason == "Shutdown" || reason == "NodeShutdown" || reason == "Terminated" ||
      reason == "NodeLost") {
    return RestartCause::kNodeLost;
  }
  return std::nullopt;
}

}  // namespace

RestartCause ClassifyRestartCause(const PodView& pod) {
  // DisruptionTarget (Kubernetes 1.26+; GA in 1.31): who is about to delete the pod, in a
  // reason the API defines, so nothing is guessed from messages or from a bare deletion.
  const std::string& disruption = pod.disruption;
  if (disruption == "EvictionByEvictionAPI") return RestartCause::kEvicted;
  if (disruption == "PreemptionByScheduler" || disruption == "PreemptionByKubeScheduler") {
    return RestartCause::kPreempted;
  }
  if (disruption == "DeletionByTaintManager" || disruption == "DeletionByPodGC") {
    return RestartCause::kNodeLost;
  }
  if (disruption == "TerminationByKubelet") {
    // The kubelet's three reasons to end a pod: node pressure (status.reason Evicted), a
    // critical pod's preemption (Preempting), the node shutting down (Terminated).
    return CauseOfStatusReason(pod.reason).value_or(RestartCause::kNodeLost);
  }
  // No condition, or a reason newer than this operator: status.reason, then the deletion.
  if (auto cause = CauseOfStatusReason(pod.reason)) return *cause;
  // Deleted (by a user, a drain on a cluster without DisruptionTarget): whatever the program
  // exited with afterwards answered the deletion's SIGTERM.
  if (pod.being_deleted || !disruption.empty()) return RestartCause::kDeleted;
  return RestartCause::kFailed;
}

int RootCauseRank(RestartCause cause, bool lost_a_peer) {
  if (cause == RestartCause::kFailed) return lost_a_peer ? 2 : 0;
  return 1;
}

}  // namespace tj::controller
