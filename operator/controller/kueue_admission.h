// Admission by Kueue (docs/kueue.md): a TrainingJob labelled kueue.x-k8s.io/queue-name starts no
// pod until Kueue has admitted the whole gang. The operator owns one Kueue Workload per such job
// (Kueue's external-framework contract): one podSet per replica type (chief, worker,
// evaluator), with the requests of the pods it would create. This file holds what the rules
// read and write of Kueue's objects (the Workload built from a job, what its status says, the
// patches and status writes the operator makes to it), all pure; the rules themselves, when a
// job waits, proceeds or stops its gang, are the reconciler's (reconciler_admission.cpp).
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "kube/resource.h"
#include "operator/api/training_job.h"

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
// Kueue's effective priority of a Workload is its priority plus this annotation's integer
// (Kueue 0.17+, its PriorityBoost feature gate): the operator sets it to what preempting the
// job would lose (PriorityBoostPatch).
inline constexpr char kPriorityBoostAnnotation[] = "kueue.x-k8s.io/priority-boost";

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
// chief and workers, `gang` being its number, status.restartCount; and the evaluator) runs or
// has succeeded; otherwise False, reason WaitForRecovery once it was True, else WaitForStart.
// The Workload with the condition set, or nullopt when it already says so (no condition says
// WaitForStart).
std::optional<nlohmann::json> WithPodsReady(const nlohmann::json& workload,
                                            const nlohmann::json& job,
                                            const api::TrainingJobSpec& spec, int gang,
                                            const std::vector<nlohmann::json>& pods,
                                            const std::string& now);

// runPolicy.suspend mapped to the Workload's spec.active, as Kueue's own integrations map a
// job's suspension: a merge patch that deactivates the Workload of a suspended job (marked
// kDeactivatedForSuspendAnnotation) or activates again one the operator deactivated for a
// suspension that has ended; nullopt when the Workload already agrees, or when someone else
// deactivated it (their decision stands: the job waits until it is active again).
std::optional<nlohmann::json> ActivePatch(const nlohmann::json& workload, bool suspended);

// The boost for a job that has trained `unsaved` since its last backup: one per `per`, at most
// `max` (0 when max is 0).
int PriorityBoost(std::chrono::seconds unsaved, std::chrono::seconds per, int max);

// A merge patch that sets the Workload's kPriorityBoostAnnotation to `boost` (removes it for
// 0); nullopt when it already says so.
std::optional<nlohmann::json> PriorityBoostPatch(const nlohmann::json& workload, int boost);

// Whether the Workload is deactivated (spec.active: false) by someone other than the operator.
bool DeactivatedByOthers(const nlohmann::json& workload);

// The ResourceFlavors named in status.admission.podSetAssignments, each once.
std::vector<std::string> AssignedFlavors(const nlohmann::json& workload);

// Puts an admitted Workload's assignment into the pod templates of `spec` (in memory, for the
// reconciler to build pods from): each assigned flavor's spec.nodeLabels into the template's
// nodeSelector, its spec.tolerations appended, and the label kueue.x-k8s.io/podset. `flavors`
// maps a flavor's name to the ResourceFlavor. An error when a flavor is missing, when a podSet
// is not a replica type of the job, or when a flavor's node label contradicts the template's
// nodeSelector (no node could run the pod).
Status ApplyAssignment(const nlohmann::json& workload,
                       const std::map<std::string, nlohmann::json>& flavors,
                       api::TrainingJobSpec& spec);

// The Workload's Finished condition as the job's end says it (Succeeded or Failed, with the
// job's message): the Workload to write to its status subresource, which gives the quota back.
nlohmann::json MarkFinished(const nlohmann::json& workload, const api::TrainingJobStatus& status,
                            const std::string& now);

// Sets condition `type` of a status object (the TrainingJob's status as JSON, conditions
// keyed by type) to status/reason/message; lastTransitionTime changes when status flips.
// True when anything changed.
bool SetCondition(nlohmann::json& status, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, const std::string& now);

// How often a waiting job looks at its Workload again: read from the API server, and read
// from the cache of a watched Workload, whose every change brings a pass anyway.
inline constexpr std::chrono::seconds kWaitPoll{2};
inline constexpr std::chrono::seconds kWatchedWaitPoll{30};
// Kueue holds the quota of an evicted Workload until its job has stopped; the gang's pods take
// up to their grace period to back up and exit.
inline constexpr std::chrono::seconds kStopPoll{1};
// How long a job whose Workload cannot be made or applied waits before it asks again.
inline constexpr std::chrono::seconds kRefusedRetry{10};

}  // namespace tj::controller::kueue
