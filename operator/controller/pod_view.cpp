#include "operator/controller/pod_view.h"

#include <algorithm>
#include <cctype>

#include "common/json_nesting.h"
#include "kube/object_meta.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler.h"

namespace tj::controller {
namespace {

using kube::TextOf;
using nlohmann::json;

// A grace period longer than a year is not one a kubelet would honour: read as absent.
constexpr int64_t kMaxGraceSeconds = 365LL * 24 * 3600;

const json& Field(const json& object, const char* key) {
  static const json kAbsent;
  if (!object.is_object()) return kAbsent;
  auto it = object.find(key);
  return it != object.end() ? *it : kAbsent;
}

// A label holding a count (replica index, gang); -1 when absent or not a small count.
int CountLabel(const json& pod, const char* key) {
  const std::string v = kube::LabelOf(pod, key);
  if (v.empty() || v.size() > 9 || !std::all_of(v.begin(), v.end(), ::isdigit)) return -1;
  return std::stoi(v);
}

std::optional<kube::WallTime> TimeOf(const json& object, const char* key) {
  const json& v = Field(object, key);
  return v.is_string() ? kube::ParseTime(v.get<std::string>()) : std::nullopt;
}

std::optional<WaitingContainer> WaitingOf(const json& container_status) {
  const json& waiting = Field(Field(container_status, "state"), "waiting");
  if (!waiting.is_object()) return std::nullopt;
  return WaitingContainer{TextOf(waiting, "reason"), TextOf(waiting, "message")};
}

// {epoch, step, globalStep, time} of a termination message {"lastBackup": {...}} (globalStep and
// time where it has them); null otherwise. The
// message is the tenant's (at most 4096 bytes, the kubelet's cap): bounded before it is parsed,
// and its counts read as the status schema reads them (CopyStatusField).
json LastBackupOf(const std::string& message) {
  constexpr size_t kMaxMessageBytes = 4096;
  constexpr size_t kMaxNesting = 4;
  if (message.empty() || message.size() > kMaxMessageBytes || message.front() != '{' ||
      JsonNesting(message) > kMaxNesting) {
    return nullptr;
  }
  const json m = json::parse(message, nullptr, /*allow_exceptions=*/false);
  const json& b = Field(m, "lastBackup");
  json out = json::object();
  if (!CopyStatusField(b, status_schema::kEpoch, out, "epoch") ||
      !CopyStatusField(b, status_schema::kStep, out, "step")) {
    return nullptr;
  }
  CopyStatusField(b, status_schema::kGlobalStep, out, "globalStep");
  if (const json& time = Field(b, "time"); time.is_string()) {
    if (auto t = kube::ParseTime(time.get<std::string>())) out["time"] = kube::FormatTime(*t);
  }
  return out;
}

std::optional<TerminatedContainer> TerminatedOf(const json& container_status) {
  const json& t = Field(Field(container_status, "state"), "terminated");
  if (!t.is_object()) return std::nullopt;
  TerminatedContainer out;
  if (const json& code = Field(t, "exitCode"); code.is_number_integer()) {
    const auto c = code.get<int64_t>();
    if (c >= INT32_MIN && c <= INT32_MAX) out.exit_code = static_cast<int>(c);
  }
  out.reason = TextOf(t, "reason");
  out.finished_at = TimeOf(t, "finishedAt");
  out.last_backup = LastBackupOf(TextOf(t, "message"));
  return out;
}

// The status of the TF_CONFIG container: the one of the name the spec gives it, else (a pod
// whose spec the cache or a test left out) by the same rule over the statuses' names.
const json& TrainerStatus(const json& pod, const json& statuses) {
  static const json kAbsent;
  if (!statuses.is_array()) return kAbsent;
  const json& containers = Field(Field(pod, "spec"), "containers");
  const int in_spec = TrainerIndexAmong(containers);
  if (in_spec >= 0) {
    const std::string name = TextOf(containers[in_spec], "name");
    for (const json& s : statuses) {
      if (TextOf(s, "name") == name) return s;
    }
    return kAbsent;  // not started yet
  }
  const int in_status = TrainerIndexAmong(statuses);
  return in_status >= 0 ? statuses[in_status] : kAbsent;
}

void ReadConditions(const json& conditions, PodView& v) {
  if (!conditions.is_array()) return;
  for (const json& c : conditions) {
    const std::string type = TextOf(c, "type"), status = TextOf(c, "status");
    if (type == "PodScheduled" && status == "False" && v.unschedulable.empty()) {
      const std::string reason = TextOf(c, "reason"), message = TextOf(c, "message");
      v.unschedulable =
          (reason.empty() ? "Unschedulable" : reason) + (message.empty() ? "" : ": " + message);
    } else if (type == "DisruptionTarget" && status == "True" && v.disruption.empty()) {
      v.disruption = TextOf(c, "reason");
    }
  }
}

}  // namespace

bool PodView::Active() const {
  return !being_deleted && (phase == "Pending" || phase == "Running" || phase == "Unknown");
}

std::string PodView::PendingReason() const {
  if (trainer_waiting && !trainer_waiting->reason.empty()) return trainer_waiting->reason;
  return unschedulable;
}

PodView ViewOfPod(const json& pod) {
  PodView v;
  const api::ObjectRef ref = api::RefOf(pod);
  v.name = ref.name;
  v.uid = ref.uid;
  v.being_deleted = kube::IsBeingDeleted(pod);
  v.created = TimeOf(kube::MetadataOf(pod), "creationTimestamp");
  v.deleted_at = TimeOf(kube::MetadataOf(pod), "deletionTimestamp");
  v.grace_ends = v.deleted_at;
  // The API server sets deletionTimestamp to when the grace period ends: the deletion was
  // asked for that many seconds before.
  const json& grace = Field(kube::MetadataOf(pod), "deletionGracePeriodSeconds");
  if (v.deleted_at && grace.is_number_integer()) {
    const auto s = grace.get<int64_t>();
    if (s > 0 && s <= kMaxGraceSeconds) *v.deleted_at -= std::chrono::seconds(s);
  }
  v.replica_type = api::ParseReplicaType(kube::LabelOf(pod, api::kLabelReplicaType));
  v.replica_index = CountLabel(pod, api::kLabelReplicaIndex);
  v.gang = CountLabel(pod, api::kLabelRestartCount);
  v.probe_index = CountLabel(pod, api::kLabelCapacityProbe);
  v.key_hash = KeyHashOf(pod);
  v.restarts_in_place = kube::LabelOf(pod, kLabelRestartInPlace) == "true";
  if (const int i = TrainerContainerIndex(Field(pod, "spec")); i >= 0) {
    v.trainer_container = TextOf(pod["spec"]["containers"][i], "name");
  }
  v.status_port = StatusPortOf(pod);
  v.node_name = NodeNameOf(pod);
  v.tolerations = TolerationsOf(Field(Field(pod, "spec"), "tolerations"));

  const json& status = Field(pod, "status");
  if (std::string phase = TextOf(status, "phase"); !phase.empty()) v.phase = std::move(phase);
  v.reason = TextOf(status, "reason");
  v.pod_ip = TextOf(status, "podIP");
  ReadConditions(Field(status, "conditions"), v);
  const json& statuses = Field(status, "containerStatuses");
  if (statuses.is_array()) {
    for (const json& s : statuses) {
      if (auto w = WaitingOf(s)) v.waiting.push_back(std::move(*w));
    }
  }
  const json& trainer = TrainerStatus(pod, statuses);
  v.trainer_waiting = WaitingOf(trainer);
  v.trainer_terminated = TerminatedOf(trainer);
  if (const json& n = Field(trainer, "restartCount"); n.is_number_integer()) {
    const auto c = n.get<int64_t>();
    if (c > 0 && c <= INT32_MAX) v.trainer_restarts = static_cast<int>(c);
  }
  return v;
}

std::string NodeNameOf(const json& pod) { return TextOf(Field(pod, "spec"), "nodeName"); }

}  // namespace tj::controller
