#include "operator/controller/kueue_admission.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/sha256.h"
#include "kube/object_meta.h"
#include "kube/time_format.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/pod_view.h"

namespace tj::controller::kueue {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr char kWorkloadPrefix[] = "trainingjob-";
constexpr size_t kMaxNameLength = 63;
constexpr size_t kHashDigits = 5;

// The condition `type` of a conditions list, or null.
const json* FindCondition(const json& object, const std::string& type) {
  const json* status =
      object.is_object() && object.contains("status") ? &object["status"] : nullptr;
  if (status == nullptr || !status->is_object() || !status->contains("conditions")) return nullptr;
  const json& conds = (*status)["conditions"];
  if (!conds.is_array()) return nullptr;
  for (const json& c : conds) {
    if (c.is_object() && kube::TextOf(c, "type") == type) return &c;
  }
  return nullptr;
}

// A metav1.Condition of a Workload (no lastUpdateTime: a strict decoder refuses the field).
void SetWorkloadCondition(json& status, const std::string& type, bool value,
                          const std::string& reason, const std::string& message,
                          const std::string& now) {
  SetCondition(status, type, value, reason, message, now);
  for (json& cond : status["conditions"]) {
    if (cond.is_object()) cond.erase("lastUpdateTime");
  }
}

bool IsTrue(const json& object, const std::string& type) {
  const json* c = FindCondition(object, type);
  return c != nullptr && kube::TextOf(*c, "status") == "True";
}

// Only what decides where and whether a pod fits: Kueue counts requests per podSet, and the
// Workload's embedded PodSpec schema drops fields it does not know.
json SchedulingPart(const json& pod_spec) {
  json out = json::object();
  for (const char* list : {"initContainers", "containers"}) {
    if (!pod_spec.contains(list) || !pod_spec[list].is_array()) continue;
    json cs = json::array();
    for (const json& c : pod_spec[list]) {
      if (!c.is_object()) continue;
      json kept = json::object();
      // resources carries the container's DRA claims (resources.claims); restartPolicy makes
      // an init container a sidecar, whose requests Kueue adds to the containers'.
      for (const char* k : {"name", "image", "resources", "restartPolicy"}) {
        if (c.contains(k)) kept[k] = c[k];
      }
      cs.push_back(std::move(kept));
    }
    if (!cs.empty()) out[list] = std::move(cs);
  }
  // resourceClaims: the pod's DRA claims, which Kueue counts against quota by their device
  // class (its deviceClassMappings); resources and overhead: pod-level requests.
  for (const char* k : {"nodeSelector", "affinity", "tolerations", "priorityClassName",
                        "resourceClaims", "resources", "overhead"}) {
    if (pod_spec.contains(k)) out[k] = pod_spec[k];
  }
  return out;
}

std::optional<api::ReplicaType> TypeOfPodSet(const std::string& name) {
  for (api::ReplicaType t :
       {api::ReplicaType::kChief, api::ReplicaType::kWorker, api::ReplicaType::kEvaluator}) {
    if (api::TaskName(t) == name) return t;
  }
  return std::nullopt;
}

// The flavor's node labels into the pod spec's nodeSelector and its tolerations appended; an
// error when a node label contradicts the nodeSelector.
Status PlaceOnFlavor(const std::string& flavor_name, const json& flavor, const std::string& pod_set,
                     json& pod_spec) {
  const json& fspec = flavor.value("spec", json::object());
  if (fspec.contains("nodeLabels") && fspec["nodeLabels"].is_object()) {
    json& sel = pod_spec["nodeSelector"];
    if (!sel.is_object()) sel = json::object();
    for (const auto& [k, v] : fspec["nodeLabels"].items()) {
      if (sel.contains(k) && sel[k] != v) {
        return Status::Error("ResourceFlavor " + flavor_name + " puts podSet " + pod_set +
                             " on nodes labelled " + k + "=" + v.dump() +
                             ", but its template's nodeSelector asks " + k + "=" + sel[k].dump() +
                             ": change one of them");
      }
      sel[k] = v;
    }
  }
  if (fspec.contains("tolerations") && fspec["tolerations"].is_array()) {
    json& tol = pod_spec["tolerations"];
    if (!tol.is_array()) tol = json::array();
    for (const json& t : fspec["tolerations"]) {
      if (std::find(tol.begin(), tol.end(), t) == tol.end()) tol.push_back(t);
    }
  }
  return Status::Ok();
}

}  // namespace

std::string QueueName(const json& job) { return kube::LabelOf(job, kQueueNameLabel); }

std::string WorkloadName(const json& job) {
  const api::ObjectRef r = api::RefOf(job);
  static constexpr char kHex[] = "0123456789abcdef";
  const Digest d = Sha256Of(r.uid.data(), r.uid.size());
  std::string hash;
  for (size_t i = 0; hash.size() < kHashDigits; ++i) {
    hash += kHex[d[i] >> 4];
    if (hash.size() < kHashDigits) hash += kHex[d[i] & 15];
  }
  std::string name = r.name;
  const size_t room = kMaxNameLength - (sizeof(kWorkloadPrefix) - 1) - 1 - kHashDigits;
  if (name.size() > room) name.resize(room);
  while (!name.empty() && (name.back() == '-' || name.back() == '.')) name.pop_back();
  return kWorkloadPrefix + name + "-" + hash;
}

json BuildWorkload(const json& job, const api::TrainingJobSpec& spec) {
  const api::ObjectRef r = api::RefOf(job);
  json pod_sets = json::array();
  for (const auto& [type, rs] : spec.replica_specs) {
    if (rs.replicas <= 0) continue;
    const json pod = BuildPod(job, spec, type, 0, 0);
    json tmpl_labels = json::object();
    const json& meta = kube::MetadataOf(rs.pod_template);
    if (meta.contains("labels") && meta["labels"].is_object()) tmpl_labels = meta["labels"];
    json pod_set = {
        {"name", api::TaskName(type)},
        {"count", rs.replicas},
        {"template",
         {{"metadata", {{"labels", tmpl_labels}}}, {"spec", SchedulingPart(pod["spec"])}}}};
    // An elastic job asks for its largest gang and takes what Kueue's partial admission
    // grants down to minReplicas (ApplyAssignment), whatever size its current gang has.
    if (type == api::ReplicaType::kWorker && spec.elastic) {
      pod_set["count"] = spec.elastic->max_replicas;
      if (spec.elastic->min_replicas < spec.elastic->max_replicas) {
        pod_set["minCount"] = spec.elastic->min_replicas;
      }
    }
    pod_sets.push_back(std::move(pod_set));
  }
  return {{"apiVersion", kWorkloads.api_version},
          {"kind", "Workload"},
          {"metadata",
           {{"name", WorkloadName(job)},
            {"namespace", r.ns},
            {"labels", {{kJobUidLabel, r.uid}, {api::kLabelJobName, r.name}}},
            {"ownerReferences", json::array({OwnerReference(job)})}}},
          {"spec", {{"queueName", QueueName(job)}, {"active", true}, {"podSets", pod_sets}}}};
}

WorkloadState StateOf(const json& workload) {
  WorkloadState s;
  s.admitted = IsTrue(workload, "Admitted");
  s.finished = IsTrue(workload, "Finished");
  s.evicted = IsTrue(workload, "Evicted");
  s.quota_reserved = IsTrue(workload, "QuotaReserved");
  const json* why = nullptr;
  if (s.evicted && s.quota_reserved) {
    why = FindCondition(workload, "Evicted");
  } else if (!s.admitted) {
    // QuotaReserved=False carries the scheduler's reason (Pending, Inadmissible) and what is
    // missing; with quota reserved, Admitted=False says which admission check is not ready.
    // An eviction whose admission is cleared: the Workload waits in its queue again.
    why = s.quota_reserved ? FindCondition(workload, "Admitted")
                           : FindCondition(workload, "QuotaReserved");
  }
  if (why != nullptr) {
    s.reason = kube::TextOf(*why, "reason");
    s.message = kube::TextOf(*why, "message");
  }
  if (workload.contains("status") && workload["status"].is_object() &&
      workload["status"].contains("admission")) {
    s.cluster_queue = kube::TextOf(workload["status"]["admission"], "clusterQueue");
  }
  return s;
}

Status SetPriority(const json& wpc, json& workload) {
  const std::string name = api::RefOf(wpc).name;
  const auto value = wpc.is_object() ? wpc.find("value") : wpc.end();
  if (!wpc.is_object() || value == wpc.end() || !value->is_number_integer() ||
      value->get<int64_t>() < INT32_MIN || value->get<int64_t>() > INT32_MAX) {
    return Status::Error("WorkloadPriorityClass " + name + " has no integer value");
  }
  json& spec = workload["spec"];
  spec["priorityClassRef"] = {
      {"group", "kueue.x-k8s.io"}, {"kind", "WorkloadPriorityClass"}, {"name", name}};
  spec["priority"] = value->get<int64_t>();
  return Status::Ok();
}

json MarkFinished(const json& workload, const api::TrainingJobStatus& st, const std::string& now) {
  json wl = workload;
  const bool ok = st.IsTrue(api::condition::kSucceeded);
  const api::Condition* c = st.Find(ok ? api::condition::kSucceeded : api::condition::kFailed);
  const std::string message = c != nullptr && !c->message.empty()
                                  ? c->message
                                  : std::string("TrainingJob ") + (ok ? "succeeded" : "failed");
  json& status = wl["status"];
  if (!status.is_object()) status = json::object();
  SetWorkloadCondition(status, "Finished", true, ok ? "Succeeded" : "Failed", message, now);
  return wl;
}

api::RestartCause CauseOfEviction(const std::string& kueue_reason) {
  if (kueue_reason == "Preempted") return api::RestartCause::kPreempted;
  if (kueue_reason == "NodeFailures") return api::RestartCause::kNodeLost;
  return api::RestartCause::kEvicted;
}

std::optional<json> WithPodsReady(const json& workload, const json& job,
                                  const api::TrainingJobSpec& spec, int gang,
                                  const std::vector<json>& pods, const std::string& now) {
  int expected = 0;
  for (api::ReplicaType t :
       {api::ReplicaType::kChief, api::ReplicaType::kWorker, api::ReplicaType::kEvaluator}) {
    expected += spec.Replicas(t);
  }
  int ready = 0;
  for (const json& p : pods) {
    if (!IsOwnedBy(p, job)) continue;
    const PodView v = ViewOfPod(p);
    if (!v.replica_type || v.being_deleted) continue;
    if (*v.replica_type != api::ReplicaType::kEvaluator && v.gang != gang) continue;
    if (v.phase == "Running" || v.phase == "Succeeded") ++ready;
  }
  const json* was = FindCondition(workload, "PodsReady");
  const std::string was_reason = was != nullptr ? kube::TextOf(*was, "reason") : "";
  const bool was_true = was != nullptr && kube::TextOf(*was, "status") == "True";
  bool value = false;
  std::string reason = "WaitForStart", message = "Not all pods are ready or succeeded";
  if (ready >= expected) {
    value = true;
    reason = was_reason == "WaitForRecovery" || was_reason == "Recovered" ? "Recovered" : "Started";
    message = "All pods reached readiness and the workload is running";
  } else if (was_true || was_reason == "WaitForRecovery") {
    reason = "WaitForRecovery";
    message = "At least one pod has failed, waiting for recovery";
  }
  if (was != nullptr && was_true == value && was_reason == reason) return std::nullopt;
  // No condition reads as WaitForStart to Kueue (its timeout then runs from the admission):
  // not written, one write per job fewer.
  if (was == nullptr && !value) return std::nullopt;
  json out = workload;
  json& status = out["status"];
  if (!status.is_object()) status = json::object();
  SetWorkloadCondition(status, "PodsReady", value, reason, message, now);
  return out;
}

namespace {
bool IsActive(const json& workload) {
  const json spec = workload.value("spec", json::object());
  const auto it = spec.find("active");
  return it == spec.end() || !it->is_boolean() || it->get<bool>();
}
bool DeactivatedForSuspend(const json& workload) {
  return kube::TextOf(kube::MetadataOf(workload).value("annotations", json::object()),
                      kDeactivatedForSuspendAnnotation) == "true";
}
}  // namespace

std::optional<json> ActivePatch(const json& workload, bool suspended) {
  if (suspended && IsActive(workload)) {
    return json{{"metadata", {{"annotations", {{kDeactivatedForSuspendAnnotation, "true"}}}}},
                {"spec", {{"active", false}}}};
  }
  if (!suspended && !IsActive(workload) && DeactivatedForSuspend(workload)) {
    return json{{"metadata", {{"annotations", {{kDeactivatedForSuspendAnnotation, nullptr}}}}},
                {"spec", {{"active", true}}}};
  }
  return std::nullopt;
}

int PriorityBoost(std::chrono::seconds unsaved, std::chrono::seconds per, int max) {
  if (max <= 0 || per.count() <= 0 || unsaved.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(max, unsaved.count() / per.count()));
}

std::optional<json> PriorityBoostPatch(const json& workload, int boost) {
  const json& meta = kube::MetadataOf(workload);
  const json annotations =
      meta.is_object() ? meta.value("annotations", json::object()) : json::object();
  const std::string have =
      annotations.is_object() ? kube::TextOf(annotations, kPriorityBoostAnnotation) : "";
  const std::string want = boost > 0 ? std::to_string(boost) : "";
  if (have == want) return std::nullopt;
  return json{
      {"metadata",
       {{"annotations", {{kPriorityBoostAnnotation, want.empty() ? json(nullptr) : json(want)}}}}}};
}

bool DeactivatedByOthers(const json& workload) {
  return !IsActive(workload) && !DeactivatedForSuspend(workload);
}

json ClearAdmission(const json& workload, const std::string& now) {
  json wl = workload;
  json& status = wl["status"];
  if (!status.is_object()) status = json::object();
  const json* evicted = FindCondition(workload, "Evicted");
  const std::string reason = evicted != nullptr ? kube::TextOf(*evicted, "reason") : "";
  const std::string message = evicted != nullptr ? kube::TextOf(*evicted, "message")
                                                 : "the job stopped without an admission";
  if (evicted != nullptr) {
    SetWorkloadCondition(status, "Requeued", reason == "Preempted" || reason == "NodeFailures",
                         reason, message, now);
  }
  SetWorkloadCondition(status, "QuotaReserved", false, "Pending", message, now);
  status.erase("admission");
  SetWorkloadCondition(status, "Admitted", false, "NoReservation",
                       "The workload has no reservation", now);
  return wl;
}

std::optional<json> LastBackupPatch(const json& job, const json& workload) {
  const json& st = job.value("status", json::object());
  const json& progress = st.is_object() ? st.value("progress", json::object()) : json::object();
  const json b = progress.is_object() ? progress.value("lastBackup", json()) : json();
  if (!b.is_object() || !b.contains("time") || !b["time"].is_string()) return std::nullopt;
  json want = json::object();
  want[kLastBackupTimeAnnotation] = b["time"];
  for (const auto& [key, field] : {std::pair{kLastBackupEpochAnnotation, "epoch"},
                                   std::pair{kLastBackupStepAnnotation, "step"}}) {
    if (b.contains(field) && b[field].is_number_integer()) {
      want[key] = std::to_string(b[field].get<int64_t>());
    }
  }
  const json& meta = kube::MetadataOf(workload);
  const json have = meta.is_object() ? meta.value("annotations", json::object()) : json::object();
  bool same = have.is_object();
  for (const auto& [key, value] : want.items()) {
    same = same && have.contains(key) && have[key] == value;
  }
  if (same) return std::nullopt;
  return json{{"metadata", {{"annotations", want}}}};
}

std::vector<std::string> AssignedFlavors(const json& workload) {
  std::vector<std::string> out;
  const json& st = workload.value("status", json::object());
  const json& adm = st.is_object() ? st.value("admission", json::object()) : json::object();
  const json& psas =
      adm.is_object() ? adm.value("podSetAssignments", json::array()) : json::array();
  if (!psas.is_array()) return out;
  for (const json& psa : psas) {
    if (!psa.is_object() || !psa.contains("flavors") || !psa["flavors"].is_object()) continue;
    for (const auto& [resource, flavor] : psa["flavors"].items()) {
      if (flavor.is_string() &&
          std::find(out.begin(), out.end(), flavor.get<std::string>()) == out.end()) {
        out.push_back(flavor.get<std::string>());
      }
    }
  }
  return out;
}

Status ApplyAssignment(const json& workload, const std::map<std::string, json>& flavors,
                       api::TrainingJobSpec& spec) {
  const json& st = workload.value("status", json::object());
  const json& adm = st.is_object() ? st.value("admission", json::object()) : json::object();
  const json& psas =
      adm.is_object() ? adm.value("podSetAssignments", json::array()) : json::array();
  if (!psas.is_array()) return Status::Ok();
  for (const json& psa : psas) {
    if (!psa.is_object()) continue;
    const std::string name = kube::TextOf(psa, "name");
    const auto type = TypeOfPodSet(name);
    if (!type || spec.replica_specs.count(*type) == 0) {
      return Status::Error("Workload " + kube::ObjectKey(workload) + " assigns podSet '" + name +
                           "', which is not a replica type of this job (chief, worker, "
                           "evaluator); delete the Workload so that the operator makes it anew");
    }
    // Kueue's partial admission (podSet minCount) granted an elastic job fewer workers.
    if (auto count = psa.find("count"); *type == api::ReplicaType::kWorker && spec.elastic &&
                                        count != psa.end() && count->is_number_integer()) {
      const int64_t granted = count->get<int64_t>();
      const int32_t chiefs = spec.Replicas(api::ReplicaType::kChief);
      const std::optional<int32_t> size =
          granted >= 1 && granted <= spec.elastic->max_replicas
              ? spec.elastic->LargestSizeUpTo(static_cast<int32_t>(granted), chiefs)
              : std::nullopt;
      if (!size) {
        return Status::Error("Workload " + kube::ObjectKey(workload) + " admits " + count->dump() +
                             " workers, which spec.elasticPolicy cannot train");
      }
      int32_t& replicas = spec.replica_specs[*type].replicas;
      replicas = std::min(replicas, *size);
    }
    json& tmpl = spec.replica_specs[*type].pod_template;
    if (!tmpl.is_object()) tmpl = json::object();
    json& labels = tmpl["metadata"]["labels"];
    if (!labels.is_object()) labels = json::object();
    labels[kPodSetLabel] = name;
    json& pod_spec = tmpl["spec"];
    if (!pod_spec.is_object()) pod_spec = json::object();
    if (!psa.contains("flavors") || !psa["flavors"].is_object()) continue;
    for (const auto& [resource, flavor_name] : psa["flavors"].items()) {
      if (!flavor_name.is_string()) continue;
      auto it = flavors.find(flavor_name.get<std::string>());
      if (it == flavors.end()) {
        return Status::Error("ResourceFlavor " + flavor_name.get<std::string>() +
                             ", assigned to podSet " + name + ", was not found");
      }
      TJ_RETURN_IF_ERROR(PlaceOnFlavor(it->first, it->second, name, pod_spec));
    }
  }
  return Status::Ok();
}

bool SetCondition(json& status, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, const std::string& now) {
  const std::string st = value ? "True" : "False";
  json& conds = status["conditions"];
  if (!conds.is_array()) conds = json::array();
  for (json& c : conds) {
    if (!c.is_object() || kube::TextOf(c, "type") != type) continue;
    if (kube::TextOf(c, "status") == st && kube::TextOf(c, "reason") == reason &&
        kube::TextOf(c, "message") == message) {
      return false;
    }
    if (kube::TextOf(c, "status") != st) c["lastTransitionTime"] = now;
    c["status"] = st;
    c["reason"] = reason;
    c["message"] = message;
    c["lastUpdateTime"] = now;
    return true;
  }
  conds.push_back({{"type", type},
                   {"status", st},
                   {"reason", reason},
                   {"message", message},
                   {"lastTransitionTime", now},
                   {"lastUpdateTime", now}});
  return true;
}

}  // namespace tj::controller::kueue
