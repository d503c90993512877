// One reconcile pass of one TrainingJob: the rules of reconciler.h, as one class whose members
// live in one file per family of rules. Internal to the reconciler (reconciler*.cpp); everyone
// else calls Reconcile().
//
//   reconciler.cpp                  Reconcile(), Pass::Run (the rules in the order they apply:
//                                   the table of contents), the actions a pass emits
//   reconciler_job.cpp              the job's life: spec, Created, suspend, deadlines, Running,
//                                   Succeeded, Failed, cleanPodPolicy and TTL once finished
//   reconciler_admission.cpp        Kueue's admission: the Workload made, the job queued until
//                                   admitted, the assignment applied, an eviction's restart
//   reconciler_gang.cpp             the gang: its pods sorted and counted, missing ones created,
//                                   a failure charged to the failure policy, a gang restart
//   reconciler_lost_node.cpp        lost nodes: a gang pod there restarts the gang at once, a
//                                   pod stuck terminating there is force-deleted
//   reconciler_gang_group.cpp       the gang's PodGroup, made before its pods, which name it
//   reconciler_rendezvous_key.cpp   the rendezvous Secret and the key the pods hold
//   reconciler_network_policy.cpp   the job's NetworkPolicy, and what a refused one says
//   reconciler_evaluator.cpp        the evaluator: supervised alone, its final evaluation awaited
//   reconciler_progress.cpp         status.progress, status.evaluation, replicaStatuses
//
// Steps that act are named as verbs (SuspendOrResume, FailOrRestartGang); a step that returns
// true has decided the pass, and Run ends it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kube/resource.h"
#include "kube/time_format.h"
#include "operator/api/training_job.h"
#include "operator/controller/gang_scheduling.h"
#include "operator/controller/kueue_admission.h"
#include "operator/controller/node_view.h"
#include "operator/controller/pod_view.h"
#include "operator/controller/reconciler.h"

namespace tj::controller::reconcile {

class Pass {
 public:
  Pass(const Observed& observed, const ReconcilerOptions& options);

  Decision Run();

 private:
  using ReplicaType = api::ReplicaType;
  using milliseconds = std::chrono::milliseconds;
  using json = nlohmann::json;

  // The chief and worker pods of one gang, by replica (pointing into pods_).
  using GangPods = std::map<std::pair<ReplicaType, int>, const PodView*>;
  // The job's pods, sorted by SortPodsAndDeleteStale.
  struct Gang {
    int number = 0;                     // the gang number: status.restartCount
    GangPods current;                   // chief and workers of this gang
    std::vector<const PodView*> stale;  // earlier gangs, removed replicas
    const PodView* evaluator = nullptr;
    std::vector<const PodView*> probes;  // an elastic job's capacity probes
  };
  struct Failure {
    std::string pod;
    PodOutcome outcome;
    bool retryable;
    api::RestartPolicy policy;
    // When it ended: the trainer container's finishedAt, or the pod's deletion when earlier
    // (PodView::deleted_at); none for a pod that is gone and was not seen going (it went
    // before any other failure could be seen).
    std::optional<kube::WallTime> at;
  };
  // How the chief and worker pods of the gang stand.
  struct GangCensus {
    std::vector<Failure> failures;
    // Pods whose trainer still runs (being deleted or not): a failure waits for them to end
    // (FailOrRestartGang), so that what came first is known.
    std::vector<std::string> still_running;
    std::vector<std::pair<ReplicaType, int>> missing;  // never created in this gang
    int running = 0, expected = 0, succeeded_workers = 0;
    bool chief_succeeded = false;
    std::optional<kube::WallTime> chief_finished;
    std::optional<kube::WallTime> earliest_pending;
    std::string root_image;  // "<pod>: <the kubelet's message>" of a pod whose image runs as root
    std::string pending_pod, pending_reason;
  };

  // --- The actions of the pass, and its end (reconciler.cpp) ---
  void Event(const std::string& type, const std::string& reason, const std::string& message);
  void Create(const kube::Resource& resource, json object);
  // The action builds the pod when it is sent (Action::build): a pass of a job of many
  // replicas holds none of them. `in_place`: a chief or worker pod gets the in-place restart
  // rules (GangRestartsInPlace); never the evaluator.
  void CreatePod(ReplicaType type, int index, int gang, bool in_place = false);
  void DeletePod(const PodView& pod);
  void Delete(const kube::Resource& resource, const std::string& name);
  void RequeueAfter(milliseconds delay);
  void RequeueAt(kube::WallTime time);
  // spec_ with each template reduced to what a pod's view reads (TemplateForView); made when
  // the pass first creates a pod.
  const api::TrainingJobSpec& ViewSpec();
  // The decision as it stands: every condition stamped with the generation this pass read,
  // the status when it changed, the actions.
  Decision End();
  // replicaStatuses counted (CountReplicas), then End().
  Decision EndCountingReplicas();

  // --- The job's life (reconciler_job.cpp) ---
  // The spec parsed and validated; false when it is invalid: the job has failed (InvalidSpec)
  // and its pods go.
  bool ParseSpecOrFail();
  void MarkCreated();
  // Suspend: no pods; resume starts afresh (new start time, a fresh gang). True: suspended.
  bool SuspendOrResume();
  bool FailPastActiveDeadline();
  // Success: the chief (else worker 0) exited 0, or every worker under AllWorkers; once the
  // evaluator's final evaluation is in (AwaitFinalEvaluation).
  bool SucceedOnceTrained(const Gang& gang, const GangCensus& census);
  // Running once every chief and worker pod runs; until then the startup deadline, and an
  // image that can never start (ImageRunsAsRoot), fail the job.
  bool MarkRunningOrFailStartup(const GangCensus& census);
  // The job's Failed condition and Warning Event; no cleanup (ParseSpecOrFail deletes every
  // pod itself: without a spec there is no cleanPodPolicy to read).
  void MarkFailed(const std::string& reason, const std::string& message);
  // MarkFailed, then CleanUp.
  void Fail(const std::string& reason, const std::string& message);
  // The Succeeded condition and Event, then CleanUp.
  void Succeed(const std::string& message);
  // What a finished job's spec asks: cleanPodPolicy's deletes, the TTL's job delete (or a
  // requeue for it).
  void CleanUp();

  // --- The gang (reconciler_gang.cpp) ---
  // The current gang, the stale pods (earlier gangs, removed replicas, a second evaluator),
  // the evaluator; deletes the stale ones.
  Gang SortPodsAndDeleteStale();
  GangCensus TakeCensus(const Gang& gang) const;
  // The last view of gang `gang`'s pod `name`, gone from the API server (Observed::departed);
  // null when none was noted.
  const PodView* DepartedPod(const std::string& name, int gang) const;
  // The whole gang exists: it was created, whatever the status says (the status of the pass
  // that created it may never have been written). A pod missing from now on is a failure.
  void NoteWholeGangCreated(const Gang& gang, const GangCensus& census);
  // PodCreateRefused=False: the API server accepted every pod create of the gang.
  void NotePodsCreated();
  // The first failure decides: once every pod of the gang has ended (or the settle time has
  // passed, WaitForTheGangToEnd), the failures ordered by when they happened; the first one
  // fails the job when its restart policy does not retry it, else restarts the gang, charged
  // as the failure policy says. Later failures are its consequences, whatever their exit code.
  // True: the pass has decided.
  bool FailOrRestartGang(const Gang& gang, const GangCensus& census);
  // The gang restarted in place (its pods' trainer containers restarted by the kubelet, the
  // most restarts of any being more than status.restarts.inPlaceOfGang): each such restart
  // counted and charged as a failure of the program (cause Failed: the kubelet removes the
  // containers and keeps no exit code), with an Event. When the budget is spent the job fails
  // and the gang's pods are deleted whatever cleanPodPolicy says (the kubelet would restart
  // them again). True: the job has failed.
  bool ChargeInPlaceRestarts(const Gang& gang);
  // "; then pod x exited with code 75, pod y ... and 3 more": the failures of `order` from
  // `from` on, the first few by name (a gang of 512 fails 511 times after its cause); "" when
  // there are none.
  static std::string Consequences(const std::vector<const Failure*>& order, size_t from);
  // True while a failure waits for pods of the gang that still run, at most
  // options_.failure_settle from status.firstFailureTime (recorded, with an Event, by the
  // first pass that sees a failure).
  bool WaitForTheGangToEnd(const GangCensus& census);
  // Charges a gang restart of `cause` (described by `why`) as spec.failurePolicy says: counts
  // it by cause and, when it counts, against backoffLimit. Returns how it was charged, for
  // the GangRestart message; nullopt after failing the job (the rule says FailJob, or the
  // budget is spent). `never_counted`: whatever the policy says, the restart neither counts
  // nor fails the job (Kueue, not the job, decided it).
  std::optional<std::string> ChargeGangRestart(api::RestartCause cause, const std::string& why,
                                               bool never_counted = false);
  // runPolicy.progressDeadlineSeconds: while the whole gang runs, the chief's global step
  // (its /status) staying the same that long since status.progressTime restarts the gang
  // with the cause Stalled. A gang whose chief has reported no step is not judged; one whose
  // chief stops answering after it did is judged by the step it last reported. True: the pass
  // has decided.
  bool RestartIfStalled(const Gang& gang, const GangCensus& census);
  // Starts gang status.restartCount + 1: deletes the `current` gang, says why (`message`) in
  // a Warning Event and the conditions Running=False and Restarting (`restarting`), of
  // `reason`. An elastic job's next gang is full-size: it grows back at every restart.
  void RestartGang(const std::string& message, const GangPods& current,
                   const std::string& reason = "GangRestart", bool restarting = true);
  // After the previous gang is gone and the restart backoff has passed.
  void CreateMissingPods(const Gang& gang, const GangCensus& census);
  // Whether the pods CreateMissingPods makes for `gang` get the in-place restart rules, decided
  // once per gang: never unless options_.restart_in_place; as the gang's pods already made were
  // (kLabelRestartInPlace), so that every pod of a gang is alike; else, for the gang's first
  // pods, as the nodes allow (ChooseInPlace of Observed::in_place_nodes).
  bool GangRestartsInPlace(const Gang& gang) const;
  // restart_backoff_base doubled `doublings` times, at most restart_backoff_max.
  milliseconds RestartBackoff(int doublings) const;

  // --- Lost nodes (reconciler_lost_node.cpp) ---
  // How the node `pod` is bound to stands for it (JudgeNode, as of now): nullopt when it is
  // not lost, when the pod is not bound, when its node is unknown, or when the operator does
  // not watch nodes. A node the pod will lose later (a tolerated taint's tolerationSeconds
  // running out) brings a pass then.
  std::optional<NodeLoss> LossOf(const PodView& pod);
  // Every pod of the job being deleted on a lost node that is not Ready: force-deleted
  // (gracePeriodSeconds 0, its UID the precondition; Event ForceDeleted naming the node)
  // options_.lost_node_force_delete after the later of its grace period's end and the node's
  // loss, or a pass then. Its kubelet will never confirm its end, and the pods of the next
  // gang take the same names. Never a pod whose node is Ready.
  void ForceDeletePodsOfLostNodes();
  // A chief or worker pod of the gang that has not ended, bound to a lost node, restarts the
  // gang now (cause NodeLost, charged as spec.failurePolicy says; Event NodeLost naming the
  // node and the pod), without waiting for Kubernetes to evict it. A failure of the gang that
  // came before the node was lost (other than a peer's lost-peer exit 75, the loss's
  // consequence) is judged first, by FailOrRestartGang. True: the pass has decided.
  bool RestartForLostNodes(const Gang& gang, const GangCensus& census);
  // The evaluator, running on a lost node, is deleted (Event NodeLost): once it is gone (the
  // force deletion above) SuperviseEvaluator makes it again, uncounted. The gang goes on.
  void ReplaceEvaluatorOnLostNode(const Gang& gang);

  // --- Elastic gangs (reconciler_elastic.cpp) ---
  // An elastic job's gang has status.elastic.workers workers (the Worker replicas when unset,
  // or when the spec no longer allows it): the pass reads spec_ with that many
  // Worker replicas, so that the census, the pods, TF_CONFIG and the PodGroup follow it.
  void SizeTheGang();
  // Kueue admitted fewer workers (partial admission, ApplyAssignment): the status says so.
  void NoteAdmittedSize();
  // A pod of the gang the scheduler has not placed spec.elasticPolicy.scheduleTimeoutSeconds
  // after it was made: the gang restarts (cause Resized, never counted) with as many workers
  // as there was room for (the chief's place kept), or one size fewer when none was placed,
  // never fewer than minReplicas and only at a size that trains the shards. True: the pass
  // has decided.
  bool ShrinkWhenUnschedulable(const Gang& gang, const GangCensus& census);
  // While the whole gang of an elastic job runs with fewer than maxReplicas workers (and
  // Kueue does not size it): a capacity probe (BuildCapacityProbe) per missing worker; once
  // the scheduler has placed probes for a larger size that trains the shards, the gang
  // restarts at that size (cause Resized, never counted; its trainers back up as they stop)
  // and the probes go. Otherwise probes are deleted. True: the pass has decided.
  bool GrowWhenThereIsRoom(const Gang& gang, const GangCensus& census);
  // The gang restarted with `workers` workers (cause Resized, never counted; Event GangResized
  // saying `why`). False when ChargeGangRestart failed the job instead.
  bool RestartResized(const Gang& gang, int32_t workers, const std::string& why);
  // Every capacity probe of the job deleted (a finished job).
  void DeleteCapacityProbes();

  // --- The gang's PodGroup (reconciler_gang_group.cpp) ---
  // Before gang `number`'s pods are created, when the job's gang is scheduled together
  // (gang::KindFor): creates its PodGroup unless the job owns it already, has the pods built
  // as its members (CreatePod), and deletes the job's PodGroups of earlier gangs. False when a
  // PodGroup of the name exists that the job does not own: the pods are not created, and a
  // Warning Event says what to do.
  bool GroupTheGang(int number);

  // --- Goodput (reconciler_goodput.cpp) ---
  // The job is admitted: the wait (since Admitted turned False) is added to the time queued.
  void NoteAdmitted();
  // The whole current gang runs and its chief reports a step: the gang trains from now on
  // (status.goodput.trainingSince), the first such step times the job's start, and a recovery
  // under way ends, its time charged to its restart's cause.
  void NoteTrainingStep(const GangCensus& census);
  // A gang restart of `cause`: counted, and charged the work since the last backup (none when
  // `lossless`: a gang Kueue stops backs up as it stops) in time and in global steps; the
  // recovery's timing starts.
  void ChargeLostWork(const std::string& cause, bool lossless);
  // Since when the current gang's work is unsaved: its last backup's time, or its first step
  // when it has backed up nothing since (it resumed from an earlier backup); none while no
  // gang trains. What a restart now would lose.
  std::optional<kube::WallTime> UnsavedSince() const;
  // status.goodput.ratio as of now (or the job's end).
  void UpdateGoodputRatio();

  // --- Kueue's admission (reconciler_admission.cpp) ---
  // For a job queued in Kueue (Observed::queue): true while it waits (no Workload yet, not
  // admitted, evicted: its gang stopped and restarted through the restart rules), the job's
  // Admitted condition saying why; false when the pass goes on: admitted (the assignment
  // applied to spec_, PodsReady written on the Workload), suspended, or running outside the
  // queue.
  bool AwaitAdmission();
  // A finished job's Workload marked Finished, which gives the quota back.
  void FinishWorkload();
  // runPolicy.suspend and the Workload's spec.active follow each other (kueue::ActivePatch);
  // true when the job is suspended. Once its pods are gone, an admission Kueue evicted is
  // released.
  bool FollowSuspend(const std::optional<json>& workload);
  // A job without its Workload: makes it (the job then waits), or says why it cannot (the
  // refusal of the last create, a missing priority class). False: the job runs outside the
  // queue (labelled after its pods were made).
  bool QueueTheJob(const QueueObserved& q);
  // A Workload not admitted, or evicted: stops the gang that runs, releases the admission once
  // it has stopped, else says Kueue's reason. Always true.
  bool WaitForAdmission(const QueueObserved& q, const kueue::WorkloadState& ws);
  // An admitted Workload: its assignment onto the templates, PodsReady, Admitted=True. False
  // when the assignment cannot be applied (the job waits, saying why).
  bool ProceedAdmitted(const QueueObserved& q, const kueue::WorkloadState& ws);
  // Kueue withdrew the admission while pods run: the current gang restarts under the cause
  // of the eviction (never counted against backoffLimit), every other pod goes too.
  void StopTheGangForKueue(const kueue::WorkloadState& ws);
  // status.progress.lastBackup from what a stopped chief reported (its termination message,
  // or as noted from the pod events) when newer; true when it changed.
  bool TakeReportedBackup();
  // The job's last backup on its Workload (kueue::LastBackupPatch), for whoever chooses whom
  // to preempt.
  void PublishLastBackup(const json& workload);
  // Kueue's priority boost on an admitted job's Workload: what preempting it would lose
  // (kueue::PriorityBoost of the work since its last backup, ReconcilerOptions).
  void PublishPreemptionCost(const json& workload);
  // A write of the job's Workload (a create, a merge patch, a status write) described as
  // `what` in its errors; tolerates a 404. The action, to adjust before the next one is added.
  Action& WriteWorkload(Action::Kind kind, const json& object, const std::string& what);
  // Admitted=False saying why the job waits; true when that changed.
  bool SetWaiting(const std::string& reason, const std::string& message);
  // SetWaiting, an Event of `type` when it changed, and a look again after `poll`.
  void WaitSaying(const std::string& type, const std::string& reason, const std::string& message,
                  milliseconds poll);
  // Whether any pod labelled with the job's name has not ended (owned or not). Read from the
  // raw pods, not the census of the job's own: Kueue's quota is released only once nothing
  // that could still be using it runs, and a pod of the job's label that another owner holds
  // (a copy adopted from a deleted job of the name, a pod a user made) uses the node all the
  // same.
  bool HasActivePods() const;

  // --- The rendezvous key (reconciler_rendezvous_key.cpp) ---
  // The rendezvous Secret: created (with the observed new key, its hash recorded in
  // status.rendezvousKeyHash) when the operator has made none yet (by the status, else by the
  // pods' hashes: HashThePodsAgreeOn), or when a pod reports it missing (SecretMissingPod).
  // Sets key_hash_.
  void EnsureSecret();
  // A pod of the job the kubelet cannot start because the rendezvous Secret is not found: its
  // name, else "".
  std::string SecretMissingPod() const;
  // The key hash that every pod of the job with one carries; "" when none has one or they
  // differ.
  std::string HashThePodsAgreeOn() const;
  // A chief or worker pod still running (or about to) with another key than the Secret's:
  // its name, else "". Pods without a hash (made by an older operator) are not judged, nor is
  // a gang of which a member has succeeded (it has trained).
  std::string PodWithAnotherKey(const GangPods& current) const;
  // A new key (the Secret was deleted and made again): the whole gang starts again.
  bool RestartForANewKey(const Gang& gang);

  // --- The job's NetworkPolicy (reconciler_network_policy.cpp) ---
  // With options_.network_policy: created when missing, unless the API server refused it
  // less than options_.network_policy_retry ago (NetworkPolicyRefused True: then a requeue
  // for the retry); NetworkPolicyRefused turns False once it exists. Without: nothing made,
  // and a NetworkPolicyRefused still True turns False.
  void EnsureNetworkPolicy();
  // The refusal of the last create in the condition NetworkPolicyRefused (True, stamped with
  // when it was refused) and, when that is new, a Warning Event; a look again once the retry
  // is due.
  void SayNetworkPolicyRefused(const Refusal& refusal);

  // --- The evaluator (reconciler_evaluator.cpp) ---
  // Created when missing, restarted alone when its restart policy says, with its own backoff
  // and its own share of backoffLimit.
  void SuperviseEvaluator(const Gang& gang);
  enum class FinalEvaluation { kNotAwaited, kAwaiting, kGraceExpired };
  // Training has succeeded: whether the job still waits (bounded by evaluator_grace) for the
  // running evaluator's final evaluation, so that cleanup never kills it.
  FinalEvaluation AwaitFinalEvaluation(const Gang& gang, const GangCensus& census);

  // --- Progress (reconciler_progress.cpp) ---
  // status.progress from the chief's /status, status.evaluation from the evaluator's.
  void CopyProgress();
  // An empty status.progress says why in the Running condition, once the chief has been
  // silent for long enough.
  void NoteMissingStatus(bool chief_answered);
  // status.replicaStatuses of the current gang and the evaluator.
  void CountReplicas();

  const Observed& observed_;
  const ReconcilerOptions& options_;
  api::ObjectRef ref_;
  // The spec, parsed once per pass and shared (not copied) with the pod actions' builders.
  std::shared_ptr<api::TrainingJobSpec> spec_holder_ = std::make_shared<api::TrainingJobSpec>();
  api::TrainingJobSpec& spec_ = *spec_holder_;
  // What BuildPod reads of the job (OwnerReference, RefOf): not its templates.
  std::shared_ptr<const json> job_identity_;
  std::unique_ptr<api::TrainingJobSpec> view_spec_;  // ViewSpec()
  api::TrainingJobStatus status_;
  json original_status_;
  std::vector<PodView> pods_;              // the job's own pods
  std::map<std::string, NodeView> nodes_;  // Observed::nodes, read
  std::vector<PodView> created_pods_;      // by this pass: Pending, so active in replicaStatuses
  std::string key_hash_;                   // of the rendezvous Secret's key, set by EnsureSecret
  // Set by GroupTheGang: the PodGroup the chief and worker pods CreatePod makes are members of.
  std::optional<std::pair<gang::Kind, std::string>> gang_group_;
  Decision decision_;
};

// How long from now until `t` (at least 1 ms: a requeue of 0 is no requeue).
std::chrono::milliseconds Until(kube::WallTime now, kube::WallTime t);

}  // namespace tj::controller::reconcile
