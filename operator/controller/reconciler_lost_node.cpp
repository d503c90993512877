// Lost nodes: a node whose Ready condition is False or Unknown, or that carries a NoExecute
// taint a pod does not tolerate (node_view.h), is lost to that pod. Kubernetes evicts such a
// pod only after its tolerationSeconds (300 s by default), and its deletion then waits for a
// kubelet that is not there: it stays Terminating, and the next gang's pods, which take the
// same names, are never made. So a chief or worker pod on a lost node restarts the gang at
// once (cause NodeLost), the evaluator there is made again elsewhere, and a pod of the job
// stuck terminating on a node that is not Ready is force-deleted once its grace has passed
// (ReconcilerOptions::lost_node_force_delete). The operator judges nodes only when it watches
// them (Observed::nodes). Part of the reconcile pass (reconciler_pass.h).
#include <algorithm>
#include <string>
#include <vector>

#include "operator/controller/reconciler_pass.h"

namespace tj::controller::reconcile {
namespace {

// How many other lost pods a message names before it counts the rest.
constexpr size_t kNamedLostPods = 4;

std::string Seconds(std::chrono::milliseconds d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + "s";
}

}  // namespace

std::optional<NodeLoss> Pass::LossOf(const PodView& pod) {
  if (pod.node_name.empty()) return std::nullopt;
  auto it = nodes_.find(pod.node_name);
  if (it == nodes_.end()) return std::nullopt;
  NodeJudgement j = JudgeNode(it->second, pod.tolerations, observed_.now);
  if (j.lost_at) RequeueAt(*j.lost_at);
  return std::move(j.lost);
}

void Pass::ForceDeletePodsOfLostNodes() {
  const milliseconds after = options_.lost_node_force_delete;
  if (after <= milliseconds(0)) return;
  for (const PodView& pod : pods_) {
    if (!pod.being_deleted || !pod.grace_ends) continue;
    const std::optional<NodeLoss> loss = LossOf(pod);
    // A node that is Ready has a kubelet that ends the pod and says so: never forced.
    if (!loss || !loss->not_ready) continue;
    const kube::WallTime from =
        loss->since && *loss->since > *pod.grace_ends ? *loss->since : *pod.grace_ends;
    if (observed_.now < from + after) {
      RequeueAt(from + after);
      continue;
    }
    Event("Warning", "ForceDeleted",
          "pod " + pod.name + " was still terminating on node " + pod.node_name + ", which " +
              loss->why + ", " + Seconds(after) +
              " after its grace period ended and the node was lost: deleted without waiting "
              "for its kubelet (gracePeriodSeconds 0), so that its name is free for the next "
              "gang; its processes may run on there until the node is back");
    Action a;
    a.kind = Action::Kind::kDelete;
    a.resource = kube::resources::kPods;
    a.name = pod.name;
    a.grace_period_seconds = 0;
    a.precondition_uid = pod.uid;
    decision_.actions.push_back(std::move(a));
  }
}

bool Pass::RestartForLostNodes(const Gang& gang, const GangCensus& census) {
  if (!observed_.nodes) return false;
  struct Lost {
    const PodView* pod;
    NodeLoss loss;
  };
  std::vector<Lost> lost;
  for (const auto& [replica, pod] : gang.current) {
    // A pod that ended (its end reported before the node went) is judged by how it ended.
    if (pod->phase == "Succeeded" || pod->phase == "Failed" || pod->trainer_terminated) continue;
    if (std::optional<NodeLoss> loss = LossOf(*pod)) lost.push_back({pod, std::move(*loss)});
  }
  if (lost.empty()) return false;
  std::stable_sort(lost.begin(), lost.end(), [](const Lost& a, const Lost& b) {
    return a.loss.since && (!b.loss.since || *a.loss.since < *b.loss.since);
  });
  const Lost& first = lost.front();
  auto on_lost_node = [&](const std::string& pod) {
    return std::any_of(lost.begin(), lost.end(), [&](const Lost& l) { return l.pod->name == pod; });
  };
  // The first failure decides: one that came before the node was lost is judged as any
  // failure is (FailOrRestartGang), but a peer's exit 75 (it lost a peer) is the loss's
  // consequence, as is the deletion of a pod on the lost node after it was lost.
  std::vector<const Failure*> consequences;
  for (const Failure& f : census.failures) {
    const bool lost_a_peer = f.outcome.exit_code == 75;
    const bool before = !f.at || !first.loss.since || *f.at < *first.loss.since;
    if (before && !lost_a_peer) return false;
    if (!on_lost_node(f.pod)) consequences.push_back(&f);
  }
  std::stable_sort(consequences.begin(), consequences.end(),
                   [](const Failure* a, const Failure* b) { return a->at < b->at; });
  std::string why = "pod " + first.pod->name + " is on node " + first.pod->node_name + ", which " +
                    first.loss.why;
  for (size_t i = 1; i < lost.size() && i <= kNamedLostPods; ++i) {
    why += (i == 1 ? "; so is pod " : ", pod ") + lost[i].pod->name + " on node " +
           lost[i].pod->node_name;
  }
  if (lost.size() > kNamedLostPods + 1) {
    why += " and " + std::to_string(lost.size() - kNamedLostPods - 1) + " more";
  }
  Event("Warning", "NodeLost",
        why + ": restarting the gang now rather than waiting for Kubernetes to evict the pod");
  auto budget = ChargeGangRestart(api::RestartCause::kNodeLost, why);
  if (!budget) return true;  // the job has failed
  RestartGang("restart " + std::to_string(status_.restart_count + 1) + " (" + *budget + "): " +
                  why + Consequences(consequences, 0) + "; restarting all chief and worker pods",
              gang.current);
  return true;
}

void Pass::ReplaceEvaluatorOnLostNode(const Gang& gang) {
  const PodView* evaluator = gang.evaluator;
  if (evaluator == nullptr || !evaluator->Active()) return;
  const std::optional<NodeLoss> loss = LossOf(*evaluator);
  if (!loss) return;
  Event("Warning", "NodeLost",
        "evaluator pod " + evaluator->name + " is on node " + evaluator->node_name + ", which " +
            loss->why +
            ": deleting it, to be made again on a node that is not lost; the gang "
            "goes on");
  DeletePod(*evaluator);
}

}  // namespace tj::controller::reconcile
