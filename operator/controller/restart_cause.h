// Why a chief or worker pod ended, as the failure policy sees it: an eviction, a preemption,
// a lost node, a deletion, or a failure of the program itself. Read from what the API server
// holds for the pod (status.reason, the DisruptionTarget condition of Kubernetes 1.26+, the
// deletionTimestamp); pure, table-tested (tests/unit/operator/controller/).
#pragma once

#include "operator/api/failure_policy.h"
#include "operator/controller/pod_view.h"

namespace tj::controller {

// The cause of a pod that ended or is being deleted. (A pod that is gone altogether was
// deleted: the reconciler says so without a view.)
api::RestartCause ClassifyRestartCause(const PodView& pod);

// Which of several pods that ended at the same moment (the kubelet's finishedAt has a
// one-second resolution) explains a gang restart, lower first: a failure of the program other
// than a lost peer (counted, so a real failure is never hidden by a disruption), then a
// disruption, then a peer that only lost another (the trainer's exit 75). Pods that ended at
// different moments are ordered by time (the reconciler's FailOrRestartGang).
int RootCauseRank(api::RestartCause cause, bool lost_a_peer);

}  // namespace tj::controller
