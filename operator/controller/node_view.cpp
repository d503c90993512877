#include "operator/controller/node_view.h"

#include <algorithm>

#include "kube/object_meta.h"

namespace tj::controller {
namespace {

using kube::TextOf;
using nlohmann::json;

constexpr char kNoExecute[] = "NoExecute";

const json& Field(const json& object, const char* key) {
  static const json kAbsent;
  if (!object.is_object()) return kAbsent;
  auto it = object.find(key);
  return it != object.end() ? *it : kAbsent;
}

std::optional<kube::WallTime> TimeOf(const json& object, const char* key) {
  const json& v = Field(object, key);
  return v.is_string() ? kube::ParseTime(v.get<std::string>()) : std::nullopt;
}

// "key=value:Effect", as kubectl writes a taint.
std::string Describe(const Taint& t) {
  return t.key + (t.value.empty() ? "" : "=" + t.value) + ":" + t.effect;
}

}  // namespace

bool Tolerates(const Toleration& toleration, const Taint& taint) {
  if (!toleration.effect.empty() && toleration.effect != taint.effect) return false;
  if (!toleration.key.empty() && toleration.key != taint.key) return false;
  if (toleration.op.empty() || toleration.op == "Equal") return toleration.value == taint.value;
  return toleration.op == "Exists";
}

std::vector<Toleration> TolerationsOf(const json& tolerations) {
  std::vector<Toleration> out;
  if (!tolerations.is_array()) return out;
  for (const json& t : tolerations) {
    if (!t.is_object()) continue;
    Toleration v{TextOf(t, "key"), TextOf(t, "operator"), TextOf(t, "value"), TextOf(t, "effect"),
                 std::nullopt};
    if (const json& s = Field(t, "tolerationSeconds"); s.is_number_integer()) {
      v.seconds = s.get<int64_t>();
    }
    out.push_back(std::move(v));
  }
  return out;
}

NodeView ViewOfNode(const json& node) {
  NodeView v;
  v.name = TextOf(kube::MetadataOf(node), "name");
  const json& spec = Field(node, "spec");
  v.unschedulable = Field(spec, "unschedulable") == true;
  if (const json& taints = Field(spec, "taints"); taints.is_array()) {
    for (const json& t : taints) {
      if (!t.is_object()) continue;
      v.taints.push_back(
          {TextOf(t, "key"), TextOf(t, "value"), TextOf(t, "effect"), TimeOf(t, "timeAdded")});
    }
  }
  const json& status = Field(node, "status");
  if (const json& features = Field(status, "declaredFeatures"); features.is_array()) {
    v.restarts_all_containers =
        std::find(features.begin(), features.end(), kRestartAllContainersFeature) != features.end();
  }
  if (const json& conditions = Field(status, "conditions"); conditions.is_array()) {
    for (const json& c : conditions) {
      if (TextOf(c, "type") != "Ready") continue;
      v.ready = TextOf(c, "status");
      v.ready_reason = TextOf(c, "reason");
      v.ready_since = TimeOf(c, "lastTransitionTime");
      break;
    }
  }
  return v;
}

bool TakesNewPods(const NodeView& node) { return node.ready == "True" && !node.unschedulable; }

InPlaceChoice ChooseInPlace(const std::optional<InPlaceNodes>& nodes) {
  using Because = InPlaceChoice::Because;
  const std::string feature = kRestartAllContainersFeature;
  if (!nodes) {
    return {false, Because::kNodesNotWatched,
            "the operator does not watch nodes (it may not list them), so it cannot tell "
            "whether they declare " +
                feature + ": gangs are made again"};
  }
  const int64_t all = nodes->declaring + nodes->lacking;
  const std::string of_all =
      std::to_string(all) + (all == 1 ? " ready, schedulable node" : " ready, schedulable nodes");
  if (all == 0) {
    return {false, Because::kNoNodes,
            "no node is ready and schedulable, so none is known to declare " + feature +
                ": gangs are made again"};
  }
  if (nodes->declaring == 0) {
    return {false, Because::kNoneDeclares,
            (all == 1 ? "the " + of_all + " (" + nodes->a_lacking + ") does not declare "
                      : "none of the " + of_all + " declares ") +
                feature + ": gangs are made again"};
  }
  if (nodes->lacking > 0) {
    const std::string others =
        nodes->lacking == 1 ? "" : " and " + std::to_string(nodes->lacking - 1) + " more";
    return {false, Because::kSomeLack,
            "node " + nodes->a_lacking + others + " of the " + of_all + " do" +
                (nodes->lacking == 1 ? "es" : "") + " not declare " + feature +
                " (the scheduler would place no gang pod with an in-place rule there): gangs "
                "are made again"};
  }
  return {
      true, Because::kAllDeclare,
      (all == 1 ? "the " + of_all + " declares " : "every one of the " + of_all + " declares ") +
          feature + ": gangs restart in place"};
}

NodeJudgement JudgeNode(const NodeView& node, const std::vector<Toleration>& tolerations,
                        kube::WallTime now) {
  NodeJudgement j;
  if (node.ready == "False" || node.ready == "Unknown") {
    std::string why = "is not ready (Ready " + node.ready;
    if (node.ready_since) why += " since " + kube::FormatTime(*node.ready_since);
    if (!node.ready_reason.empty()) why += ": " + node.ready_reason;
    j.lost = NodeLoss{why + ")", node.ready_since, /*not_ready=*/true};
    return j;
  }
  if (node.ready.empty()) return j;
  for (const Taint& taint : node.taints) {
    if (taint.effect != kNoExecute) continue;
    auto by = std::find_if(tolerations.begin(), tolerations.end(),
                           [&](const Toleration& t) { return Tolerates(t, taint); });
    std::optional<NodeLoss> loss;
    if (by == tolerations.end()) {
      loss = NodeLoss{"has the taint " + Describe(taint) + ", which the pod does not tolerate",
                      taint.time_added};
    } else if (by->seconds && *by->seconds <= 0) {
      loss = NodeLoss{"has the taint " + Describe(taint) + ", which the pod tolerates for 0s",
                      taint.time_added};
    } else if (by->seconds && taint.time_added) {
      const kube::WallTime until = *taint.time_added + std::chrono::seconds(*by->seconds);
      if (now < until) {
        if (!j.lost_at || until < *j.lost_at) j.lost_at = until;
        continue;
      }
      loss = NodeLoss{"has had the taint " + Describe(taint) + " since " +
                          kube::FormatTime(*taint.time_added) + ", which the pod tolerates for " +
                          std::to_string(*by->seconds) + "s",
                      until};
    }
    // The earliest loss decides; one not timed comes last.
    if (loss && (!j.lost || (loss->since && (!j.lost->since || *loss->since < *j.lost->since)))) {
      j.lost = std::move(loss);
    }
  }
  if (j.lost) j.lost_at.reset();
  return j;
}

}  // namespace tj::controller
