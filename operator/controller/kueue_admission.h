// Admission by Kueue (docs/kueue.md): a TrainingJob labelled kueue.x-k8s.io/queue-name starts no
// pod until Kueue has admitted the whole gang. The operator owns one Kueue Workload per such job
// (Kueue's external-framework contract): one podSet per replica type (chief, worker,
// evaluator), with the requests of the pods it would create. Until the Workload is Admitted the
// job waits, its condition Admitted=False says why (Kueue's own message, e.g. the quota it
// lacks) and an Event says it when that changes; once admitted, the flavors' node labels and
// tolerations reach the pods, and when the job ends the Workload is marked Finished, which
// gives its quota back. When Kueue evicts the Workload (preemption by a higher-priority one, a
// stopped queue), the gang stops losslessly: its pods are deleted, so each trainer gets SIGTERM,
// backs up the step the gang agrees on and exits; the restart is counted by cause, never
// against backoffLimit; once no pod is left the admission is cleared (Kueue then frees the
// quota and requeues the Workload), and the readmitted gang resumes from that backup. Jobs
// without the label are not touched.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "kube/client.h"
#include "kube/event_recorder.h"
#include "kube/object_cache.h"
#include "kube/resource.h"
#include "operator/api/training_job.h"
#include "operator/controller/reconciler.h"

namespace tj::controller::kueue {

inline constexpr char kQueueNameLabel[] = "kueue.x-k8s.io/queue-name";
inline constexpr char kJobUidLabel[] = "kueue.x-k8s.io/job-uid";
inline constexpr char kPodSetLabel[] = "kueue.x-k8s.io/podset";
// The last backup of a running job (status.progress.lastBackup), published on its Workload
// for a scheduler or a person choosing whom to preempt (docs/kueue.md).
inline constexpr char kLastBackupTimeAnnotation[] = "tjo.dev/last-backup-time";
inline constexpr char kLastBackupEpochAnnotation[] = "tjo.dev/last-backup-epoch";
inline constexpr char kLastBackupStepAnnotation[] = "tjo.dev/last-backup-step";
// On a Workload the operator deactivated (spec.active: false) because its job was suspended
// (runPolicy.suspend): it activates it again when the job is resumed. A Workload deactivated
// without it (by an admin, `kueuectl stop workload`) is left so, and its job waits, Suspended.
inline constexpr char kDeactivatedForSuspendAnnotation[] = "tjo.dev/deactivated-for-suspend";
// The job's WorkloadPriorityClass (Kueue's label, as on its own job kinds).
inline constexpr char kPriorityClassLabel[] = "kueue.x-k8s.io/priority-class";
// The job's condition while Kueue decides (False) and once it has admitted the gang (True).
inline constexpr char kAdmittedCondition[] = "Admitted";
// status.state of a job that waits for admission (the State column of `kubectl get tj`).
inline constexpr char kQueuedState[] = "Queued";

inline const kube::Resource kWorkloads{"kueue.x-k8s.io/v1beta2", "workloads"};
inline const kube::Resource kResourceFlavors{"kueue.x-k8s.io/v1beta2", "resourceflavors", false};
inline const kube::Resource kWorkloadPriorityClasses{"kueue.x-k8s.io/v1beta2",
                                                     "workloadpriorityclasses", false};

// The LocalQueue the job asks for; "" when it is not queued.
std::string QueueName(const nlohmann::json& job);

// "trainingjob-<name>-<5 hex digits of the uid's hash>", at most 63 characters (Kueue copies
// the name into label values).
std::string WorkloadName(const nlohmann::json& job);

// The Workload of `job`: queueName from the label, one podSet per replica type with replicas
// (named chief, worker, evaluator; count = replicas) whose template is the scheduling part of
// the pod the operator would create (containers' and init containers' names, images and
// resources; nodeSelector, affinity, tolerations, priorityClassName), owned by the job.
nlohmann::json BuildWorkload(const nlohmann::json& job, const api::TrainingJobSpec& spec);

// Gives `workload` the priority of WorkloadPriorityClass `wpc` (the object as read):
// spec.priorityClassRef naming it and spec.priority its value (Kueue's webhook derives
// neither for a Workload it did not build). An error when the class has no integer value.
Status SetPriority(const nlohmann::json& wpc, nlohmann::json& workload);

// What a Workload's status says.
struct WorkloadState {
  bool admitted = false;        // condition Admitted=True
  bool finished = false;        // condition Finished=True
  bool evicted = false;         // condition Evicted=True
  bool quota_reserved = false;  // condition QuotaReserved=True
  std::string reason;           // why it is not admitted (or evicted), in Kueue's words
  std::string message;
  std::string cluster_queue;  // status.admission.clusterQueue
};
WorkloadState StateOf(const nlohmann::json& workload);

// The restart cause a Kueue eviction is counted under in status.restarts.byCause: Preempted for
// Kueue's reason Preempted (a higher-priority Workload took the quota), NodeLost for
// NodeFailures, Evicted for every other (a stopped queue, deactivation, a failed admission
// check ...). None counts against backoffLimit, whatever spec.failurePolicy says: Kueue, not
// the job, decided, and Kueue decides when it runs again.
api::RestartCause CauseOfEviction(const std::string& kueue_reason);

// The Workload with its admission cleared after its job stopped, as Kueue's job framework does
// it (workload.UnsetQuotaReservationWithCondition): QuotaReserved=False (reason Pending, the
// eviction's message), no status.admission, Admitted=False (NoReservation), and Requeued (True
// for evictions Kueue requeues at once, Preempted and NodeFailures; False otherwise). Kueue
// then frees the quota and queues the Workload again.
nlohmann::json ClearAdmission(const nlohmann::json& workload, const std::string& now);

// A merge patch that puts the job's status.progress.lastBackup {epoch, step, time} into the
// Workload's kLastBackup*Annotation; nullopt when the job has none or the Workload already
// says it.
std::optional<nlohmann::json> LastBackupPatch(const nlohmann::json& job,
                                              const nlohmann::json& workload);

// Kueue's PodsReady condition of an admitted Workload, as Kueue's job framework computes it for
// its own kinds (what its waitForPodsReady reads: a Workload not ready within the timeout, or
// not recovered within recoveryTimeout, is evicted and requeued): True, reason Started (or
// Recovered after WaitForRecovery), when every pod the Workload counts (the current gang's
// chief and workers, and the evaluator) runs or has succeeded; otherwise False, reason
// WaitForRecovery once it was True, else WaitForStart. The Workload with the condition set, or
// nullopt when it already says so (no condition says WaitForStart).
std::optional<nlohmann::json> WithPodsReady(const nlohmann::json& workload,
                                            const nlohmann::json& job,
                                            const api::TrainingJobSpec& spec,
                                            const std::vector<nlohmann::json>& pods,
                                            const std::string& now);

// runPolicy.suspend mapped to the Workload's spec.active, as Kueue's own integrations map a
// job's suspension: a merge patch that deactivates the Workload of a suspended job (marked
// kDeactivatedForSuspendAnnotation) or activates again one the operator deactivated for a
// suspension that has ended; nullopt when the Workload already agrees, or when someone else
// deactivated it (their decision stands: the job waits until it is active again).
std::optional<nlohmann::json> ActivePatch(const nlohmann::json& workload, bool suspended);

// Whether the Workload is deactivated (spec.active: false) by someone other than the operator.
bool DeactivatedByOthers(const nlohmann::json& workload);

// The ResourceFlavors named in status.admission.podSetAssignments, each once.
std::vector<std::string> AssignedFlavors(const nlohmann::json& workload);

// Puts an admitted Workload's assignment into `job`'s pod templates (in memory, for the
// reconciler to build pods from): each assigned flavor's spec.nodeLabels into the template's
// nodeSelector, its spec.tolerations appended, and the label kueue.x-k8s.io/podset. `flavors`
// maps a flavor's name to the ResourceFlavor. An error when a flavor is missing, or when its
// node label contradicts the template's nodeSelector (no node could run the pod).
Status ApplyAssignment(const nlohmann::json& workload,
                       const std::map<std::string, nlohmann::json>& flavors, nlohmann::json& job);

// Sets condition `type` of a status object (the TrainingJob's status as JSON, conditions
// keyed by type) to status/reason/message; lastTransitionTime changes when status flips.
// True when anything changed.
bool SetCondition(nlohmann::json& status, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, const std::string& now);

// The outcome of Gate().
struct GateResult {
  bool proceed = true;  // false: the job waits; no reconcile, no pod
  // The job's status changed (in->job["status"]): write it, whether or not it proceeds.
  bool status_changed = false;
  std::optional<std::chrono::milliseconds> requeue_after;  // when !proceed
  // When !proceed: what to do before waiting (the evicted gang's pod deletions, Events).
  std::vector<Action> actions;
};

// The step of an evicted job whose pods remain: deletes every pod of the job not yet being
// deleted (each trainer gets SIGTERM and stops losslessly), and the first time (pods of the
// current gang, status.restartCount, remain) counts a gang restart of CauseOfEviction(reason)
// in status.restarts.byCause, not against backoffLimit, with an Event. The job's status says
// why it waits: Admitted=False with Kueue's reason, Running=False, state Queued. Pure: changes
// in->job["status"], returns the actions; true in `changed` when the status changed.
std::vector<Action> StopEvictedGang(Observed* in, const WorkloadState& ws, bool* changed);

// How often a waiting job looks at its Workload again: read from the API server, and read
// from the cache of a watched Workload, whose every change enqueues its job anyway.
inline constexpr std::chrono::seconds kWaitPoll{2};
inline constexpr std::chrono::seconds kWatchedWaitPoll{30};

// Where Gate reads Kueue's objects: the operator's caches where it watches them (informers on
// the Workloads labelled with a job's name, on ResourceFlavors and WorkloadPriorityClasses:
// job_informers.h), else, each null, the API server. Read from the caches, a pass of a queued
// job asks the API server nothing; the creates, patches and status updates stay live.
struct KueueCaches {
  const kube::ObjectCache* workloads = nullptr;
  const kube::ObjectCache* flavors = nullptr;
  const kube::ObjectCache* priority_classes = nullptr;
};

// One pass of the admission gate for a job that is not another controller's: does nothing for
// a job without the queue label. Otherwise creates the Workload when there is none, marks it
// Finished when the job has finished, and lets the job's reconcile proceed only once the
// Workload is admitted (with the assignment applied to in->job) or the job already runs or has
// ended. Events go through `recorder` (may be null). Errors of the API server are returned; a
// missing Kueue (no Workload API) or a forbidden create is a condition, not an error.
StatusOr<GateResult> Gate(kube::Client& client, const KueueCaches& caches,
                          kube::EventRecorder* recorder, Observed* in);

}  // namespace tj::controller::kueue
