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

// Kueue holds the quota of an evicted Workload until its job has stopped; the gang's pods take
// up to their grace period to back up and exit.
constexpr std::chrono::seconds kStopPoll{1};

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

bool HasActivePods(const Observed& in) {
  return std::any_of(in.pods.begin(), in.pods.end(), [](const json& p) {
    const std::string phase = p.contains("status") ? kube::TextOf(p["status"], "phase") : "";
    return phase != "Succeeded" && phase != "Failed";
  });
}

// The waiting job's status: Admitted=False with why, state Queued while no lifecycle state.
bool SetWaiting(Observed* in, const std::string& reason, const std::string& message) {
  json& status = in->job["status"];
  if (!status.is_object()) status = json::object();
  bool changed =
      SetCondition(status, kAdmittedCondition, false, reason, message, kube::FormatTime(in->now));
  if (kube::TextOf(status, "state").empty() || kube::TextOf(status, "state") == kQueuedState) {
    if (kube::TextOf(status, "state") != kQueuedState) changed = true;
    status["state"] = kQueuedState;
  }
  return changed;
}

// The object `name` of `r` in `ns` from `cache` when it is watched (nullopt: none), else from
// the API server (nullopt: 404).
kube::Result<std::optional<json>> Read(kube::Client& client, const kube::ObjectCache* cache,
                                       const kube::Resource& r, const std::string& ns,
                                       const std::string& name) {
  if (cache != nullptr) return cache->Get(kube::ObjectKey(ns, name));
  auto got = client.Get(r, ns, name);
  if (got.ok()) return std::optional<json>(std::move(*got));
  if (kube::IsNotFound(got.error())) return std::optional<json>();
  return got.error();
}

GateResult Wait(bool changed, milliseconds poll) {
  GateResult r;
  r.proceed = false;
  r.status_changed = changed;
  r.requeue_after = poll;
  return r;
}

void Record(kube::EventRecorder* recorder, const json& job, const std::string& type,
            const std::string& reason, const std::string& message) {
  if (recorder != nullptr) recorder->RecordAsync(job, type, reason, message);
}

// Marks the Workload Finished (Kueue then frees its quota), with the job's outcome.
Status MarkFinished(kube::Client& client, const json& workload, const api::TrainingJobStatus& st,
                    const std::string& now) {
  json wl = workload;
  const bool ok = st.IsTrue(api::condition::kSucceeded);
  const api::Condition* c = st.Find(ok ? api::condition::kSucceeded : api::condition::kFailed);
  const std::string message = c != nullptr && !c->message.empty()
                                  ? c->message
                                  : std::string("TrainingJob ") + (ok ? "succeeded" : "failed");
  json& status = wl["status"];
  if (!status.is_object()) status = json::object();
  SetWorkloadCondition(status, "Finished", true, ok ? "Succeeded" : "Failed", message, now);
  const api::ObjectRef ref = api::RefOf(wl);
  auto r = client.UpdateStatus(kWorkloads, ref.ns, wl);
  if (r.ok() || kube::IsNotFound(r.error())) return Status::Ok();
  // 409: Kueue wrote meanwhile; the next pass reads it again.
  return r.error().ToStatus().WithContext("marking Workload " + ref.ns + "/" + ref.name +
                                          " Finished");
}

// A queued job without a Workload: makes it (the job then waits), or says why it cannot.
StatusOr<GateResult> CreateWorkload(kube::Client& client, const KueueCaches& caches,
                                    kube::EventRecorder* recorder, Observed* in,
                                    const api::TrainingJobSpec& spec, const std::string& name) {
  const api::ObjectRef ref = api::RefOf(in->job);
  if (HasActivePods(*in)) {
    // Labelled after its pods were made: the gang runs outside the queue; say so.
    Record(recorder, in->job, "Warning", "NotQueued",
           "the kueue.x-k8s.io/queue-name label was added while the job's pods ran; the "
           "job runs without Kueue's admission (set the label when creating the job)");
    return GateResult{};
  }
  json workload = BuildWorkload(in->job, spec);
  if (const std::string pc = kube::LabelOf(in->job, kPriorityClassLabel); !pc.empty()) {
    auto wpc = Read(client, caches.priority_classes, kWorkloadPriorityClasses, "", pc);
    const bool forbidden = !wpc.ok() && wpc.error().code == 403;
    if (!wpc.ok() && !forbidden) {
      return wpc.error().ToStatus().WithContext("reading WorkloadPriorityClass " + pc);
    }
    Status priority = wpc.ok() && *wpc ? SetPriority(**wpc, workload) : Status::Ok();
    if (!wpc.ok() || !*wpc || !priority.ok()) {
      const std::string message =
          !priority.ok() ? priority.message()
          : forbidden    ? "the operator may not read WorkloadPriorityClass " + pc +
                            " (Helm value kueue.enabled=true grants it): " + wpc.error().message
                      : "WorkloadPriorityClass " + pc + " (label " + kPriorityClassLabel +
                            ") does not exist: create it, or change the label";
      const std::string reason = forbidden ? "WorkloadForbidden" : "PriorityClassNotFound";
      const bool changed = SetWaiting(in, reason, message);
      if (changed) Record(recorder, in->job, "Warning", reason, message);
      return Wait(changed, std::chrono::seconds(10));
    }
  }
  auto created = client.Create(kWorkloads, ref.ns, workload);
  if (!created.ok() && !kube::IsAlreadyExists(created.error())) {
    const kube::ApiError& e = created.error();
    std::string reason = "WorkloadCreateFailed", message;
    if (e.code == 404) {
      reason = "KueueNotInstalled";
      message =
          "the API server has no workloads.kueue.x-k8s.io/v1beta2: install Kueue "
          "(docs/kueue.md) or remove the kueue.x-k8s.io/queue-name label";
    } else if (e.code == 403) {
      reason = "WorkloadForbidden";
      message =
          "the operator may not create Kueue Workloads: install it with the Kueue "
          "permissions (Helm value kueue.enabled=true): " +
          e.message;
    } else if (e.code == 422 || e.code == 400) {
      message = "Kueue refused the job's Workload: " + e.message;
    } else {
      return e.ToStatus().WithContext("creating Workload " + ref.ns + "/" + name);
    }
    const bool changed = SetWaiting(in, reason, message);
    if (changed) Record(recorder, in->job, "Warning", reason, message);
    return Wait(changed, std::chrono::seconds(10));
  }
  const bool changed = SetWaiting(
      in, "Pending",
      "waiting for Kueue to admit Workload " + name + " in LocalQueue " + QueueName(in->job));
  if (changed) {
    Record(recorder, in->job, "Normal", "Queued",
           "created Workload " + name + " in LocalQueue " + QueueName(in->job) +
               "; no pod starts before Kueue admits the whole gang");
  }
  return Wait(changed, caches.workloads != nullptr ? kWatchedWaitPoll : kWaitPoll);
}

// status.progress.lastBackup from what a stopped chief reported (NewestReportedBackup of the
// pods, else as noted from their events: Observed::reported_backup) when it is newer; true when
// the status changed.
bool TakeReportedBackup(Observed* in) {
  std::vector<PodView> pods;
  for (const json& p : in->pods) {
    if (IsOwnedBy(p, in->job)) pods.push_back(ViewOfPod(p));
  }
  bool took = false;
  for (const json& reported : {NewestReportedBackup(pods), in->reported_backup}) {
    if (reported.is_null()) continue;
    json& status = in->job["status"];
    if (!status.is_object()) status = json::object();
    took = TakeNewerBackup(status["progress"], reported) || took;
  }
  return took;
}

// The job's last backup on its Workload, for whoever chooses a victim; a failure does not
// hold the job up.
void PublishLastBackup(kube::Client& client, kube::EventRecorder* recorder, const json& job,
                       const json& workload, const std::string& name) {
  auto patch = LastBackupPatch(job, workload);
  if (!patch) return;
  auto r = client.Patch(kWorkloads, api::RefOf(job).ns, name, kube::PatchType::kMerge, *patch);
  if (!r.ok() && !kube::IsNotFound(r.error())) {
    Record(recorder, job, "Warning", "LastBackupNotPublished",
           "annotating Workload " + name + " with the last backup: " + r.error().message +
               " (the operator needs patch on workloads: Helm value kueue.enabled=true)");
  }
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
    pod_sets.push_back(
        {{"name", api::TaskName(type)},
         {"count", rs.replicas},
         {"template",
          {{"metadata", {{"labels", tmpl_labels}}}, {"spec", SchedulingPart(pod["spec"])}}}});
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

api::RestartCause CauseOfEviction(const std::string& kueue_reason) {
  if (kueue_reason == "Preempted") return api::RestartCause::kPreempted;
  if (kueue_reason == "NodeFailures") return api::RestartCause::kNodeLost;
  return api::RestartCause::kEvicted;
}

std::optional<json> WithPodsReady(const json& workload, const json& job,
                                  const api::TrainingJobSpec& spec, const std::vector<json>& pods,
                                  const std::string& now) {
  const int gang =
      api::TrainingJobStatus::FromJson(job.value("status", json::object())).restart_count;
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

std::vector<Action> StopEvictedGang(Observed* in, const WorkloadState& ws, bool* changed) {
  std::vector<Action> actions;
  api::TrainingJobStatus st =
      api::TrainingJobStatus::FromJson(in->job.value("status", json::object()));
  const std::string kueue_reason = ws.reason.empty() ? "NotAdmitted" : ws.reason;
  const std::string kueue_said =
      kueue_reason + (ws.message.empty() ? std::string() : ": " + ws.message);
  bool current_gang = false;
  for (const json& p : in->pods) {
    if (!IsOwnedBy(p, in->job)) continue;
    const PodView v = ViewOfPod(p);
    const bool ended = v.phase == "Succeeded" || v.phase == "Failed";
    // A gang that has ended (trained, or failed: the reconciler's to judge) is not restarted.
    if (v.replica_type && *v.replica_type != api::ReplicaType::kEvaluator &&
        v.gang == st.restart_count && !ended) {
      current_gang = true;
    }
    if (v.being_deleted || ended) continue;
    Action a;
    a.kind = Action::Kind::kDelete;
    a.resource = kube::resources::kPods;
    a.name = v.name;
    actions.push_back(std::move(a));
  }
  const std::string before = st.ToJson().dump();
  if (current_gang) {
    // Counted once: the next gang is restartCount + 1, so these pods are an earlier gang's.
    const std::string cause = api::ToString(CauseOfEviction(ws.reason));
    st.restart_count += 1;
    st.created_generation = -1;
    st.first_failure_time.reset();
    st.restarts.by_cause[cause] += 1;
    const std::string message =
        "Kueue evicted the job's Workload (" + kueue_said + "); stopping the gang: each trainer " +
        "backs up the step the gang reaches and exits. Restart " +
        std::to_string(st.restart_count) + " (" + cause +
        ", not counted against backoffLimit) starts from that backup when Kueue admits the " +
        "job again";
    st.SetCondition(api::condition::kRunning, false, cause, message, in->now);
    st.SetCondition(api::condition::kRestarting, false, cause, message, in->now);
    Action e;
    e.kind = Action::Kind::kEvent;
    e.event_type = "Warning";
    e.reason = cause;
    e.message = message;
    actions.push_back(std::move(e));
  }
  json status = st.ToJson();
  *changed = status.dump() != before;
  status["state"] = kQueuedState;
  if (kube::TextOf(in->job.value("status", json::object()), "state") != kQueuedState) {
    *changed = true;
  }
  const std::string waiting =
      "Kueue withdrew the admission (" + kueue_said +
      "); waiting for the gang's pods to stop (its trainers back up and exit), then for Kueue "
      "to admit the job again";
  if (SetCondition(status, kAdmittedCondition, false, kueue_reason, waiting,
                   kube::FormatTime(in->now))) {
    *changed = true;
  }
  in->job["status"] = std::move(status);
  return actions;
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
                       json& job) {
  const json& st = workload.value("status", json::object());
  const json& adm = st.is_object() ? st.value("admission", json::object()) : json::object();
  const json& psas =
      adm.is_object() ? adm.value("podSetAssignments", json::array()) : json::array();
  if (!psas.is_array()) return Status::Ok();
  for (const json& psa : psas) {
    if (!psa.is_object()) continue;
    const std::string name = kube::TextOf(psa, "name");
    const auto type = TypeOfPodSet(name);
    if (!type) {
      return Status::Error("Workload " + kube::ObjectKey(workload) + " assigns podSet '" + name +
                           "', which is not a replica type of this job (chief, worker, "
                           "evaluator); delete the Workload so that the operator makes it anew");
    }
    json& rs = job["spec"]["replicaSpecs"][api::ToString(*type)];
    json& tmpl = rs["template"];
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
      const json& fspec = it->second.value("spec", json::object());
      if (fspec.contains("nodeLabels") && fspec["nodeLabels"].is_object()) {
        json& sel = pod_spec["nodeSelector"];
        if (!sel.is_object()) sel = json::object();
        for (const auto& [k, v] : fspec["nodeLabels"].items()) {
          if (sel.contains(k) && sel[k] != v) {
            return Status::Error("ResourceFlavor " + it->first + " puts podSet " + name +
                                 " on nodes labelled " + k + "=" + v.dump() +
                                 ", but its template's nodeSelector asks " + k + "=" +
                                 sel[k].dump() + ": change one of them");
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

// runPolicy.suspend mapped to the Workload's spec.active (ActivePatch), `workload` (if any)
// patched in place. True when the job is suspended: the reconciler then suspends it (its pods
// deleted, Suspended), and once they are gone an admission Kueue has evicted (the Workload
// deactivated) is released, so the quota goes back; a job suspended before its Workload exists
// gets none until it is resumed.
StatusOr<bool> FollowSuspend(kube::Client& client, kube::EventRecorder* recorder, Observed* in,
                             const api::TrainingJobSpec& spec, const std::string& name,
                             const std::string& now, std::optional<json>* workload) {
  const api::ObjectRef ref = api::RefOf(in->job);
  const bool suspended = spec.run_policy.suspend;
  if (!*workload) return suspended;
  if (auto patch = ActivePatch(**workload, suspended)) {
    auto r = client.Patch(kWorkloads, ref.ns, name, kube::PatchType::kMerge, *patch);
    if (!r.ok() && !kube::IsNotFound(r.error())) {
      return r.error().ToStatus().WithContext(
          std::string(suspended ? "deactivating" : "activating") + " Workload " + ref.ns + "/" +
          name + " (the operator needs patch on workloads: Helm value kueue.enabled=true)");
    }
    Record(recorder, in->job, "Normal", suspended ? "WorkloadDeactivated" : "WorkloadActivated",
           "Workload " + name +
               (suspended ? " deactivated: the job is suspended, Kueue frees its quota"
                          : " active again: the job is resumed and queued"));
    if (r.ok()) *workload = std::move(*r);
  }
  if (!suspended || HasActivePods(*in)) return suspended;
  const WorkloadState ws = StateOf(**workload);
  if (ws.evicted && ws.quota_reserved) {
    auto r = client.UpdateStatus(kWorkloads, ref.ns, ClearAdmission(**workload, now));
    if (!r.ok() && !kube::IsConflict(r.error()) && !kube::IsNotFound(r.error())) {
      return r.error().ToStatus().WithContext("clearing the admission of Workload " + ref.ns + "/" +
                                              name);
    }
  }
  return true;
}

StatusOr<GateResult> Gate(kube::Client& client, const KueueCaches& caches,
                          kube::EventRecorder* recorder, Observed* in) {
  if (QueueName(in->job).empty()) return GateResult{};
  auto spec = api::ParseSpec(in->job.value("spec", json::object()));
  if (!spec.ok()) return GateResult{};  // the reconciler reports an invalid spec
  const api::ObjectRef ref = api::RefOf(in->job);
  const api::TrainingJobStatus st =
      api::TrainingJobStatus::FromJson(in->job.value("status", json::object()));
  const std::string name = WorkloadName(in->job);
  const std::string now = kube::FormatTime(in->now);

  auto got = Read(client, caches.workloads, kWorkloads, ref.ns, name);
  if (!got.ok()) {
    return got.error().ToStatus().WithContext("reading Workload " + ref.ns + "/" + name +
                                              " of TrainingJob " + ref.ns + "/" + ref.name);
  }
  std::optional<json> workload = std::move(*got);
  if (workload && !IsOwnedBy(*workload, in->job)) {
    return Status::Error("Workload " + ref.ns + "/" + name + " exists and is not owned by " +
                         "TrainingJob " + ref.ns + "/" + ref.name + "; delete it");
  }

  if (st.Finished()) {  // the job is done: its quota goes back, its end is the reconciler's
    if (workload && !StateOf(*workload).finished) {
      TJ_RETURN_IF_ERROR(MarkFinished(client, *workload, st, now));
    }
    return GateResult{};
  }

  // runPolicy.suspend and the Workload's spec.active follow each other (ActivePatch).
  auto suspended = FollowSuspend(client, recorder, in, *spec, name, now, &workload);
  if (!suspended.ok()) return suspended.status();
  if (*suspended) return GateResult{};  // the reconciler suspends the job

  if (!workload) return CreateWorkload(client, caches, recorder, in, *spec, name);

  const WorkloadState ws = StateOf(*workload);
  if (ws.evicted || !ws.admitted) {
    // The step the next gang resumes from, as the stopping chief reported it (its termination
    // message): in the job's status and on the Workload, where Kueue and an admin look.
    const bool took_backup = TakeReportedBackup(in);
    PublishLastBackup(client, recorder, in->job, *workload, name);
    if (HasActivePods(*in)) {
      // Evicted (preempted, its queue stopped, deactivated) or not admitted while pods run:
      // stop the gang losslessly and wait for its pods to go. Kueue holds the quota meanwhile.
      bool changed = false;
      std::vector<Action> stop = StopEvictedGang(in, ws, &changed);
      GateResult r = Wait(changed || took_backup, kStopPoll);
      r.actions = std::move(stop);
      return r;
    }
    if (ws.evicted && ws.quota_reserved) {
      // The gang has stopped: clear the admission, so that Kueue frees the quota and queues
      // the Workload again (the job framework's contract).
      auto r = client.UpdateStatus(kWorkloads, ref.ns, ClearAdmission(*workload, now));
      if (!r.ok() && !kube::IsConflict(r.error()) && !kube::IsNotFound(r.error())) {
        return r.error().ToStatus().WithContext("clearing the admission of Workload " + ref.ns +
                                                "/" + name);
      }
      if (r.ok()) {
        Record(recorder, in->job, "Normal", "AdmissionReleased",
               "the gang has stopped; released Workload " + name +
                   "'s quota: Kueue queues the job again");
      }
      return Wait(took_backup, kStopPoll);  // a 409: Kueue wrote meanwhile; read it again
    }
    const std::string reason = ws.reason.empty() ? "Pending" : ws.reason;
    const std::string message =
        ws.message.empty() ? "Kueue has not decided on Workload " + name +
                                 " yet (if this lasts: is Kueue running, does LocalQueue " +
                                 QueueName(in->job) + " exist?)"
                           : ws.message;
    bool changed = SetWaiting(in, reason, message);
    if (changed) Record(recorder, in->job, "Normal", reason, message);
    if (DeactivatedByOthers(*workload)) {
      // Kueue's deactivation, the other way: the job is suspended while its Workload is.
      changed = SetCondition(in->job["status"], "Suspended", true, "WorkloadDeactivated",
                             "Workload " + name +
                                 " is deactivated (spec.active: false, set outside this job): "
                                 "the job waits until it is active again",
                             now) ||
                changed;
    }
    return Wait(changed || took_backup, caches.workloads != nullptr ? kWatchedWaitPoll : kWaitPoll);
  }

  std::map<std::string, json> flavors;
  for (const std::string& f : AssignedFlavors(*workload)) {
    auto rf = Read(client, caches.flavors, kResourceFlavors, "", f);
    if (!rf.ok()) return rf.error().ToStatus().WithContext("reading ResourceFlavor " + f);
    if (*rf) flavors[f] = std::move(**rf);  // a missing one: ApplyAssignment names it
  }
  if (Status applied = ApplyAssignment(*workload, flavors, in->job); !applied.ok()) {
    // Admitted, but no pod could run where Kueue puts it: the job says why and waits (a
    // changed flavor or template is read again on the next pass).
    const std::string reason = "AssignmentNotApplicable";
    const bool changed = SetWaiting(in, reason, applied.message());
    if (changed) Record(recorder, in->job, "Warning", reason, applied.message());
    return Wait(changed, std::chrono::seconds(10));
  }
  PublishLastBackup(client, recorder, in->job, *workload, name);
  if (auto ready = WithPodsReady(*workload, in->job, *spec, in->pods, now)) {
    auto r = client.UpdateStatus(kWorkloads, ref.ns, *ready);
    // A 409 (Kueue wrote meanwhile) or a 404: the next pass, which a pod's change brings.
    if (!r.ok() && !kube::IsConflict(r.error()) && !kube::IsNotFound(r.error())) {
      Record(recorder, in->job, "Warning", "PodsReadyNotWritten",
             "setting PodsReady on Workload " + name + ": " + r.error().message +
                 " (the operator needs update on workloads/status: Helm value "
                 "kueue.enabled=true)");
    }
  }
  json& status = in->job["status"];
  if (!status.is_object()) status = json::object();
  const std::string message =
      "admitted by ClusterQueue " + ws.cluster_queue + " (Workload " + name + ")";
  GateResult r;
  r.status_changed = SetCondition(status, kAdmittedCondition, true, "Admitted", message, now);
  if (kube::TextOf(status, "state") == kQueuedState) status.erase("state");
  if (r.status_changed) Record(recorder, in->job, "Normal", "Admitted", message);
  return r;
}

}  // namespace tj::controller::kueue
