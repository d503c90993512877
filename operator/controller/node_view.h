// What the operator reads of a Node, and how a pod's tolerations meet the node's taints as
// Kubernetes matches them: enough to tell whether the node a job's pod is bound to is lost
// (its Ready condition False or Unknown, or a NoExecute taint the pod does not tolerate), and
// since when; and whether the nodes that take new pods all declare the feature in-place
// restarts need (ChooseInPlace). The lost-node rules (reconciler_lost_node.cpp) and the
// choice of a gang's restarts read nodes only through this view.
// A Node's status is written by its kubelet and the node controller, its taints by anyone who
// may patch nodes, a pod's tolerations by a tenant: a field that is missing or of another type
// reads as absent, never throws. Pure.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kube/time_format.h"

namespace tj::controller {

// spec.taints[] of a Node.
struct Taint {
  std::string key, value;
  std::string effect;                        // NoSchedule, PreferNoSchedule or NoExecute
  std::optional<kube::WallTime> time_added;  // timeAdded: set on NoExecute taints
  bool operator==(const Taint&) const = default;
};

// spec.tolerations[] of a pod.
struct Toleration {
  std::string key;
  std::string op;  // operator: Exists or Equal ("" means Equal)
  std::string value;
  std::string effect;  // "" matches every effect
  // tolerationSeconds (NoExecute only): how long after the taint was added the pod stays
  // bound; none: forever; 0 or less: not at all.
  std::optional<int64_t> seconds;
  bool operator==(const Toleration&) const = default;
};

// Kubernetes' Toleration.ToleratesTaint (k8s.io/api/core/v1/toleration.go): the effect and key
// match when the toleration names them (an empty key with Exists matches every key), then
// Exists matches any value and Equal ("") the same value; any other operator matches nothing.
// tolerationSeconds is not looked at here (JudgeNode).
bool Tolerates(const Toleration& toleration, const Taint& taint);

// A pod's spec.tolerations (an array; anything else reads as none).
std::vector<Toleration> TolerationsOf(const nlohmann::json& tolerations);

// The feature a kubelet declares (status.declaredFeatures, Kubernetes 1.36+) when it restarts
// every container of a pod in place on a container restart rule's RestartAllContainers action.
// The scheduler places a pod carrying such a rule only on a node that declares it.
inline constexpr char kRestartAllContainersFeature[] = "RestartAllContainersOnContainerExits";

struct NodeView {
  std::string name;
  // The Ready condition: True, False or Unknown ("" when the node has none), its reason
  // (KubeletNotReady, NodeStatusUnknown, ...) and lastTransitionTime.
  std::string ready;
  std::string ready_reason;
  std::optional<kube::WallTime> ready_since;
  std::vector<Taint> taints;
  bool unschedulable = false;  // spec.unschedulable: cordoned (not lost: its pods run on)
  // status.declaredFeatures lists kRestartAllContainersFeature.
  bool restarts_all_containers = false;
  bool operator==(const NodeView&) const = default;
};

NodeView ViewOfNode(const nlohmann::json& node);

// Whether the scheduler may place a new pod on `node`: Ready True and not cordoned. Its taints
// are not looked at: a pod may tolerate them, so a tainted node still counts.
bool TakesNewPods(const NodeView& node);

// The nodes that take new pods (TakesNewPods), as the operator watches them, by whether they
// declare kRestartAllContainersFeature.
struct InPlaceNodes {
  int64_t declaring = 0;
  int64_t lacking = 0;
  std::string a_lacking;  // the name of one that does not declare it; "" when none
  bool operator==(const InPlaceNodes&) const = default;
};

// Whether a new gang's chief and worker pods get the in-place restart rules
// (InPlaceRestartRules), where the operator may give them (--restart-in-place=auto on a 1.36+
// API server), and why.
struct InPlaceChoice {
  enum class Because {
    kNodesNotWatched,  // the operator does not watch nodes (it may not list them)
    kNoNodes,          // no node takes new pods
    kNoneDeclares,     // none of those that do declares the feature
    kSomeLack,         // some of them do not
    kAllDeclare,       // every one of them does
  };
  bool on = false;
  Because because = Because::kNodesNotWatched;
  std::string why;  // "every one of the 3 ready, schedulable nodes declares ..."
};

// On only when every node that takes new pods declares kRestartAllContainersFeature, and there
// is one: the scheduler places a pod with the rules on no other node, so a gang made with them
// while one node lacks it could stay Pending where it would otherwise run. `nodes` is nullopt
// when the operator does not watch nodes: it cannot tell, and the gang is made without (a
// failure makes it again). The scheduler may read other things (a node selector, affinity,
// taints): every node counts, whatever the gang's pods ask, so the choice errs toward making
// the gang again.
InPlaceChoice ChooseInPlace(const std::optional<InPlaceNodes>& nodes);

// Why a pod's node is lost to it, and since when.
struct NodeLoss {
  // "is not ready (Ready Unknown since 2026-03-01T10:00:00Z: NodeStatusUnknown)", "has the
  // taint k=v:NoExecute, which the pod does not tolerate": follows "node <name> ".
  std::string why;
  // When it was lost: the Ready condition's transition, or when the taint came (timeAdded),
  // plus the toleration's tolerationSeconds when the pod tolerated it for a while; none when
  // the node does not say.
  std::optional<kube::WallTime> since;
  // Ready is False or Unknown: no kubelet there will confirm that a pod of it has ended. (A
  // node that is Ready but carries an untolerated NoExecute taint still has one.)
  bool not_ready = false;
};

struct NodeJudgement {
  std::optional<NodeLoss> lost;  // lost as of now
  // Not lost yet, but will be then: a NoExecute taint tolerated for tolerationSeconds.
  std::optional<kube::WallTime> lost_at;
};

// How `node` stands for a pod with `tolerations` at `now`. Lost when its Ready condition is
// False or Unknown, whatever the pod tolerates (a synchronous gang makes no progress without
// every member, so waiting out the not-ready and unreachable tolerations that Kubernetes gives
// every pod, 300 s by default, only idles the rest of the gang); else when it carries a
// NoExecute taint that no toleration of the pod tolerates, or whose toleration (the first
// that tolerates it, as Kubernetes' taint eviction takes it) has a tolerationSeconds that has
// run out since the taint's timeAdded. A taint tolerated for a while without a timeAdded
// cannot be timed: it is taken as tolerated (Kubernetes' taint eviction, which times it from
// when it saw it, evicts the pod, and the pod's deletion restarts the gang). A node without a
// Ready condition (still registering) is not lost.
NodeJudgement JudgeNode(const NodeView& node, const std::vector<Toleration>& tolerations,
                        kube::WallTime now);

}  // namespace tj::controller
