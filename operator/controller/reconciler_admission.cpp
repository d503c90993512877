// Kueue's admission (docs/kueue.md): a job labelled kueue.x-k8s.io/queue-name starts no pod
// until Kueue has admitted the whole gang. The rules read the job's Workload, the flavors its
// admission assigns and the job's WorkloadPriorityClass as observed (Observed::queue, from the
// operator's caches), and act through the decision: the Workload's create, patches and status
// writes are actions like a pod's. Once admitted, the flavors' node labels and tolerations
// reach the pods; when the job ends the Workload is marked Finished, which gives its quota
// back. When Kueue evicts the Workload (preemption by a higher-priority one, a stopped queue),
// the gang stops losslessly through the restart rules: its pods are deleted, so each trainer
// gets SIGTERM, backs up the step the gang agrees on and exits; the restart is counted by
// cause, never against backoffLimit; once no pod is left the admission is cleared (Kueue then
// frees the quota and requeues the Workload), and the readmitted gang resumes from that backup.
// Part of the reconcile pass (reconciler_pass.h).
#include <algorithm>
#include <string>

#include "kube/object_meta.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/kueue_admission.h"
#include "operator/controller/reconciler_pass.h"

namespace tj::controller::reconcile {

namespace cond = api::condition;

namespace {

// The permissions a Workload's patches and status writes need, for their errors.
constexpr char kWorkloadWriteHint[] =
    " (the operator needs patch on workloads and update on workloads/status: Helm value "
    "kueue.enabled=true)";

bool Ended(const PodView& p) { return p.phase == "Succeeded" || p.phase == "Failed"; }

}  // namespace

bool Pass::HasActivePods() const {
  return std::any_of(observed_.pods.begin(), observed_.pods.end(), [](const json& p) {
    const std::string phase = p.contains("status") ? kube::TextOf(p["status"], "phase") : "";
    return phase != "Succeeded" && phase != "Failed";
  });
}

bool Pass::SetWaiting(const std::string& reason, const std::string& message) {
  return status_.SetWaitingCondition(cond::kAdmitted, reason, message, observed_.now);
}

void Pass::WaitSaying(const std::string& type, const std::string& reason,
                      const std::string& message, milliseconds poll) {
  if (SetWaiting(reason, message)) Event(type, reason, message);
  RequeueAfter(poll);
}

Action& Pass::WriteWorkload(Action::Kind kind, const json& object, const std::string& what) {
  Action a;
  a.kind = kind;
  a.resource = kueue::kWorkloads;
  a.name = kueue::WorkloadName(observed_.job);
  a.object = object;
  a.what = what + " Workload " + ref_.ns + "/" + a.name;
  a.hint = kWorkloadWriteHint;
  a.tolerated = {404};
  decision_.actions.push_back(std::move(a));
  return decision_.actions.back();
}

bool Pass::AwaitAdmission() {
  if (!observed_.queue || kueue::QueueName(observed_.job).empty()) return false;
  const QueueObserved& q = *observed_.queue;
  const std::string name = kueue::WorkloadName(observed_.job);
  if (q.workload && !IsOwnedBy(*q.workload, observed_.job)) {
    WaitSaying("Warning", "WorkloadNotOwned",
               "Workload " + ref_.ns + "/" + name + " exists and is not owned by TrainingJob " +
                   ref_.ns + "/" + ref_.name + ": delete it, and the operator makes the job's own",
               kueue::kRefusedRetry);
    return true;
  }
  if (FollowSuspend(q.workload)) return false;  // suspended: SuspendOrResume deletes the pods
  if (!q.workload) return QueueTheJob(q);
  const kueue::WorkloadState ws = kueue::StateOf(*q.workload);
  if (ws.evicted || !ws.admitted) return WaitForAdmission(q, ws);
  return !ProceedAdmitted(q, ws);
}

void Pass::FinishWorkload() {
  if (!observed_.queue || !observed_.queue->workload) return;
  const json& workload = *observed_.queue->workload;
  if (!IsOwnedBy(workload, observed_.job) || kueue::StateOf(workload).finished) return;
  // A 409 (Kueue wrote meanwhile) fails the pass: the next one marks what it reads.
  WriteWorkload(Action::Kind::kUpdateStatus,
                kueue::MarkFinished(workload, status_, kube::FormatTime(observed_.now)),
                "marking Finished");
}

bool Pass::FollowSuspend(const std::optional<json>& workload) {
  const bool suspended = spec_.run_policy.suspend;
  if (!workload) return suspended;  // a job suspended before it is queued gets no Workload
  if (auto patch = kueue::ActivePatch(*workload, suspended)) {
    WriteWorkload(Action::Kind::kPatch, *patch, suspended ? "deactivating" : "activating");
    const std::string name = kueue::WorkloadName(observed_.job);
    Event("Normal", suspended ? "WorkloadDeactivated" : "WorkloadActivated",
          "Workload " + name +
              (suspended ? " deactivated: the job is suspended, Kueue frees its quota"
                         : " active again: the job is resumed and queued"));
  }
  if (!suspended || HasActivePods()) return suspended;
  const kueue::WorkloadState ws = kueue::StateOf(*workload);
  if (ws.evicted && ws.quota_reserved) {  // Kueue evicted the deactivated Workload: release it
    WriteWorkload(Action::Kind::kUpdateStatus,
                  kueue::ClearAdmission(*workload, kube::FormatTime(observed_.now)),
                  "clearing the admission of")
        .tolerated = {404, 409};
  }
  return true;
}

bool Pass::QueueTheJob(const QueueObserved& q) {
  const std::string name = kueue::WorkloadName(observed_.job);
  if (HasActivePods()) {
    // Labelled after its pods were made: the gang runs outside the queue; say so.
    Event("Warning", "NotQueued",
          "the kueue.x-k8s.io/queue-name label was added while the job's pods ran; the job runs "
          "without Kueue's admission (set the label when creating the job)");
    return false;
  }
  if (auto r = observed_.refused.find(kueue::kWorkloads.plural); r != observed_.refused.end()) {
    const Refusal& refusal = r->second;
    std::string reason = "WorkloadCreateFailed";
    std::string message = "Kueue refused the job's Workload: " + refusal.message;
    if (refusal.code == 404) {
      reason = "KueueNotInstalled";
      message =
          "the API server has no workloads.kueue.x-k8s.io/v1beta2: install Kueue "
          "(docs/kueue.md) or remove the kueue.x-k8s.io/queue-name label";
    } else if (refusal.code == 403) {
      reason = "WorkloadForbidden";
      message =
          "the operator may not create Kueue Workloads: install it with the Kueue permissions "
          "(Helm value kueue.enabled=true): " +
          refusal.message;
    }
    WaitSaying("Warning", reason, message, kueue::kRefusedRetry);
    return true;
  }
  json workload = kueue::BuildWorkload(observed_.job, spec_);
  if (const std::string pc = kube::LabelOf(observed_.job, kueue::kPriorityClassLabel);
      !pc.empty()) {
    Status priority =
        q.priority_class ? kueue::SetPriority(*q.priority_class, workload) : Status::Ok();
    if (!q.priority_class || !priority.ok()) {
      const bool forbidden = !q.priority_class_error.empty();
      const std::string message =
          !priority.ok() ? priority.message()
          : forbidden    ? "the operator may not read WorkloadPriorityClass " + pc +
                            " (Helm value kueue.enabled=true grants it): " + q.priority_class_error
                      : "WorkloadPriorityClass " + pc + " (label " + kueue::kPriorityClassLabel +
                            ") does not exist: create it, or change the label";
      WaitSaying("Warning", forbidden ? "WorkloadForbidden" : "PriorityClassNotFound", message,
                 kueue::kRefusedRetry);
      return true;
    }
  }
  Action& create = WriteWorkload(Action::Kind::kCreate, workload, "creating");
  create.tolerated = {409};  // made by a pass the cache does not show yet
  create.refusable = {400, 403, 404, 422};
  create.hint.clear();
  const std::string local_queue = kueue::QueueName(observed_.job);
  if (SetWaiting("Pending",
                 "waiting for Kueue to admit Workload " + name + " in LocalQueue " + local_queue)) {
    Event("Normal", "Queued",
          "created Workload " + name + " in LocalQueue " + local_queue +
              "; no pod starts before Kueue admits the whole gang");
  }
  RequeueAfter(q.watched ? kueue::kWatchedWaitPoll : kueue::kWaitPoll);
  return true;
}

bool Pass::WaitForAdmission(const QueueObserved& q, const kueue::WorkloadState& ws) {
  const json& workload = *q.workload;
  const std::string name = kueue::WorkloadName(observed_.job);
  // The step the next gang resumes from, as the stopping chief reported it (its termination
  // message): in the job's status and on the Workload, where Kueue and an admin look.
  TakeReportedBackup();
  PublishLastBackup(workload);
  if (HasActivePods()) {
    // Evicted (preempted, its queue stopped, deactivated) or not admitted while pods run: stop
    // the gang losslessly and wait for its pods to go. Kueue holds the quota meanwhile.
    StopTheGangForKueue(ws);
    RequeueAfter(kueue::kStopPoll);
    return true;
  }
  if (ws.evicted && ws.quota_reserved) {
    // The gang has stopped: clear the admission, so that Kueue frees the quota and queues the
    // Workload again (the job framework's contract). A 409: Kueue wrote meanwhile; read again.
    WriteWorkload(Action::Kind::kUpdateStatus,
                  kueue::ClearAdmission(workload, kube::FormatTime(observed_.now)),
                  "clearing the admission of")
        .tolerated = {404, 409};
    Event(
        "Normal", "AdmissionReleased",
        "the gang has stopped; released Workload " + name + "'s quota: Kueue queues the job again");
    RequeueAfter(kueue::kStopPoll);
    return true;
  }
  const std::string reason = ws.reason.empty() ? "Pending" : ws.reason;
  const std::string message = ws.message.empty()
                                  ? "Kueue has not decided on Workload " + name +
                                        " yet (if this lasts: is Kueue running, does LocalQueue " +
                                        kueue::QueueName(observed_.job) + " exist?)"
                                  : ws.message;
  if (SetWaiting(reason, message)) Event("Normal", reason, message);
  if (kueue::DeactivatedByOthers(workload)) {
    // Kueue's deactivation, the other way: the job is suspended while its Workload is.
    status_.SetCondition(cond::kSuspended, true, "WorkloadDeactivated",
                         "Workload " + name +
                             " is deactivated (spec.active: false, set outside this job): the "
                             "job waits until it is active again",
                         observed_.now);
  }
  RequeueAfter(q.watched ? kueue::kWatchedWaitPoll : kueue::kWaitPoll);
  return true;
}

bool Pass::ProceedAdmitted(const QueueObserved& q, const kueue::WorkloadState& ws) {
  const json& workload = *q.workload;
  const std::string name = kueue::WorkloadName(observed_.job);
  if (Status applied = kueue::ApplyAssignment(workload, q.flavors, spec_); !applied.ok()) {
    // Admitted, but no pod could run where Kueue puts it: the job says why and waits (a
    // changed flavor or template is read again on the next pass).
    WaitSaying("Warning", "AssignmentNotApplicable", applied.message(), kueue::kRefusedRetry);
    return false;
  }
  PublishLastBackup(workload);
  PublishPreemptionCost(workload);
  const std::string now = kube::FormatTime(observed_.now);
  if (auto ready = kueue::WithPodsReady(workload, observed_.job, spec_, status_.restart_count,
                                        observed_.pods, now)) {
    // A 409 (Kueue wrote meanwhile) or a 404: the next pass, which a pod's change brings.
    Action& write = WriteWorkload(Action::Kind::kUpdateStatus, *ready, "setting PodsReady on");
    write.tolerated = {404, 409};
    write.warn_reason = "PodsReadyNotWritten";
  }
  const std::string message =
      "admitted by ClusterQueue " + ws.cluster_queue + " (Workload " + name + ")";
  NoteAdmitted();
  if (status_.SetCondition(cond::kAdmitted, true, "Admitted", message, observed_.now)) {
    Event("Normal", "Admitted", message);
  }
  return true;
}

bool Pass::TakeReportedBackup() {
  bool took = false;
  for (const json& reported : {NewestReportedBackup(pods_), observed_.reported_backup}) {
    if (!reported.is_null()) took = TakeNewerBackup(status_.progress, reported) || took;
  }
  return took;
}

void Pass::PublishLastBackup(const json& workload) {
  auto patch = kueue::LastBackupPatch(json{{"status", {{"progress", status_.progress}}}}, workload);
  if (!patch) return;
  // A failure does not hold the job up: it is said, and the next pass tries again.
  WriteWorkload(Action::Kind::kPatch, *patch, "annotating with the last backup").warn_reason =
      "LastBackupNotPublished";
}

void Pass::PublishPreemptionCost(const json& workload) {
  // The unsaved work, as ChargeLostWork would count it if Kueue stopped the gang without a
  // backup.
  std::chrono::seconds unsaved{0};
  if (const auto from = UnsavedSince()) {
    unsaved = std::chrono::duration_cast<std::chrono::seconds>(observed_.now - *from);
  }
  const int boost = kueue::PriorityBoost(unsaved, options_.kueue_priority_boost_per,
                                         options_.kueue_priority_boost_max);
  if (auto patch = kueue::PriorityBoostPatch(workload, boost)) {
    WriteWorkload(Action::Kind::kPatch, *patch, "setting the priority boost of").warn_reason =
        "PriorityBoostNotSet";
  }
  // Looked at again when the boost would next grow.
  if (boost < options_.kueue_priority_boost_max && status_.goodput.training_since) {
    RequeueAfter(std::chrono::duration_cast<milliseconds>(options_.kueue_priority_boost_per));
  }
}

void Pass::StopTheGangForKueue(const kueue::WorkloadState& ws) {
  const std::string kueue_reason = ws.reason.empty() ? "NotAdmitted" : ws.reason;
  const std::string kueue_said =
      kueue_reason + (ws.message.empty() ? std::string() : ": " + ws.message);
  // The current gang's chief and workers that still run: a gang that has ended (trained, or
  // failed: the other rules judge it) is not restarted.
  GangPods current;
  for (const PodView& p : pods_) {
    if (p.replica_type && *p.replica_type != ReplicaType::kEvaluator &&
        p.gang == status_.restart_count && !Ended(p)) {
      current[{*p.replica_type, p.replica_index}] = &p;
    }
  }
  if (!current.empty()) {
    // Counted once: the next gang is restartCount + 1, so these pods are an earlier gang's.
    const api::RestartCause cause = kueue::CauseOfEviction(ws.reason);
    const std::string why = "Kueue evicted the job's Workload (" + kueue_said + ")";
    auto budget = ChargeGangRestart(cause, why, /*never_counted=*/true);
    RestartGang(why +
                    "; stopping the gang: each trainer backs up the step the gang reaches and "
                    "exits. Restart " +
                    std::to_string(status_.restart_count + 1) + " (" + *budget +
                    ") starts from that backup when Kueue admits the job again",
                current, api::ToString(cause), /*restarting=*/false);
  }
  for (const PodView& p : pods_) {  // the evaluator and earlier gangs go too: the quota is one
    const bool restarted = std::any_of(current.begin(), current.end(),
                                       [&p](const auto& member) { return member.second == &p; });
    if (!Ended(p) && !restarted) DeletePod(p);
  }
  SetWaiting(kueue_reason, "Kueue withdrew the admission (" + kueue_said +
                               "); waiting for the gang's pods to stop (its trainers back up "
                               "and exit), then for Kueue to admit the job again");
}

}  // namespace tj::controller::reconcile
