// The pure core of the operator: what one TrainingJob needs, given what is observed.
//   Reconcile(observed job, pods, service, trainer /status snapshots, now)
//     -> actions (create/delete objects, events), the new status, when to look again.
// No I/O and no clock of its own, so every lifecycle rule is unit-tested with tables
// (tests/unit/operator/controller/). The executor (executor.h) applies the decision.
// Every rule reads only what the API server holds (labels, status), so a restarted operator
// continues where the last one stopped.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status_schema.h"
#include "kube/resource.h"
#include "kube/time_format.h"
#include "operator/api/training_job.h"
#include "operator/controller/network_policy.h"
#include "operator/controller/node_view.h"
#include "operator/controller/pod_view.h"

namespace tj::controller {

struct ReconcilerOptions {
  // Gang restart k waits base * 2^(k-1), at most max, after its pods are gone.
  std::chrono::milliseconds restart_backoff_base{std::chrono::seconds(1)};
  std::chrono::milliseconds restart_backoff_max{std::chrono::seconds(60)};
  // How long a job whose training succeeded waits for the evaluator's final evaluation.
  std::chrono::milliseconds evaluator_grace{std::chrono::seconds(300)};
  // Requeue period of a running job, so status.progress stays fresh.
  std::chrono::milliseconds progress_poll{std::chrono::seconds(5)};
  // How long a gang's failure waits, from the first one seen (status.firstFailureTime), for
  // the gang's other chief and worker pods to end before it is judged: the failure that came
  // first decides, and a program's exit after losing a peer is only its consequence.
  std::chrono::milliseconds failure_settle{std::chrono::seconds(30)};
  // Set: every job gets its NetworkPolicy (BuildNetworkPolicy), made again when it goes.
  std::optional<NetworkPolicySettings> network_policy;
  // How long after the API server refused a job's NetworkPolicy (the condition
  // NetworkPolicyRefused) its create is tried again.
  std::chrono::milliseconds network_policy_retry{std::chrono::seconds(60)};
  // The cluster serves Kubernetes' own PodGroups (gang_scheduling.h): a job whose
  // schedulingPolicy.gang is Auto gets one per gang.
  bool native_pod_groups = false;
  // At most this much Kueue priority boost (kueue.x-k8s.io/priority-boost on an admitted
  // job's Workload): one per kueue_priority_boost_per of work since the job's last backup, so
  // that Kueue, choosing among jobs of one priority, preempts the one that loses least. 0: no
  // boost. Keep it below the gaps between priority classes, or a boosted job is never
  // preempted by the next class up (docs/kueue.md).
  int kueue_priority_boost_max = 0;
  std::chrono::seconds kueue_priority_boost_per{60};
  // Gangs may restart in place: a new gang's chief and worker pods get InPlaceRestartRules
  // (job_resources.h) when the nodes allow (Observed::in_place_nodes, ChooseInPlace), and then a
  // retryable failure restarts the gang's containers in place, its pods, IPs, volumes and images
  // kept, and the operator only counts it (ChargeInPlaceRestarts). Set at start from
  // --restart-in-place=auto and the API server's version (1.36+; docs/reliability.md).
  bool restart_in_place = false;
  // A pod of the job being deleted on a lost node that is not Ready (node_view.h), whose
  // kubelet is not there to confirm its end, is force-deleted (gracePeriodSeconds 0, its UID
  // the precondition) this long after the later of its grace period's end (deletionTimestamp)
  // and the node's loss; 0: never (it stays until its node comes back, or an admin deletes it).
  std::chrono::milliseconds lost_node_force_delete{std::chrono::seconds(30)};
};

// What the API server refused of an earlier pass's action (a create of the job's NetworkPolicy
// or Kueue Workload): the executor keeps it and hands it to the job's next pass
// (Observed::refused), whose rules say it in the job's status and decide when to ask again.
struct Refusal {
  int code = 0;         // the API server's answer: 400, 403, 404 (an API it does not serve), 422
  std::string message;  // what it said, or why the operator took the answer as a refusal
  kube::WallTime at{};
};

// Kueue's objects of a job queued in Kueue (kueue_admission.h), as the executor read them from
// the operator's caches (informers on Workloads, ResourceFlavors, WorkloadPriorityClasses), or
// from the API server where it does not watch them.
struct QueueObserved {
  std::optional<nlohmann::json> workload;  // kueue::WorkloadName(job), whoever owns it
  // The ResourceFlavors the Workload's admission assigns, by name (one that is missing is not
  // among them).
  std::map<std::string, nlohmann::json> flavors;
  // The WorkloadPriorityClass the job's label names, read while the job has no Workload;
  // nullopt when there is none, or when `priority_class_error` says why it was not read.
  std::optional<nlohmann::json> priority_class;
  std::string priority_class_error;  // the API server's 403 message
  bool watched = false;  // Workloads are watched: each change brings a pass, the poll is slow
};

// Copies a field of a trainer's /status answer (its documented schema, docs/tfjob.md) into the
// job's status: sets to[to_key] = from[field.key] when that is a value of field.kind
// (status_schema.h); true when it did. The answer is the tenant's: only a value of the field's
// kind is copied, so that nothing else (an object, a huge string, a count of another type)
// reaches the job's status, where the CRD's schema would refuse the whole status write.
bool CopyStatusField(const nlohmann::json& from, status_schema::Field field, nlohmann::json& to,
                     const char* to_key);

// What the reconciler reads of a trainer's /status answer, under the answer's own keys: the
// schema's fields of their kinds (CopyStatusField), nothing else. What the status poller keeps
// of an answer (a few numbers rather than up to 64 KiB of the tenant's), and what it compares
// to tell whether a new answer changes the job.
nlohmann::json CopiedTrainerStatus(const nlohmann::json& answer);

// The newest backup (by epoch, then step) that a pod's trainer reported as it ended, in its
// termination message (TerminatedContainer::last_backup): {epoch, step, time}; null when none
// did. Only a chief has backups to report.
nlohmann::json NewestReportedBackup(const std::vector<PodView>& pods);

// Makes `backup` ({epoch, step, time}) the lastBackup of `progress` (status.progress; an object
// is made of null) when it has none or an older one; true when it changed. Backups only move
// forward: a gang resumes from the newest one.
bool TakeNewerBackup(nlohmann::json& progress, const nlohmann::json& backup);

struct Observed {
  nlohmann::json job;                     // the TrainingJob as read from the API server
  std::vector<nlohmann::json> pods;       // pods labelled tjo.dev/job-name=<job>
  std::optional<nlohmann::json> service;  // "<job>", when it exists
  // NetworkPolicyName(<job>), when it exists and the job owns it.
  std::optional<nlohmann::json> network_policy;
  std::map<std::string, nlohmann::json> trainer_status;  // pod name -> its /status answer
  // Evaluator pod name -> the last "evaluation" event of its log (read once it has ended).
  std::map<std::string, nlohmann::json> final_evaluation;
  // The newest backup a stopped chief of the job reported ({epoch, step, time}), noted from the
  // pod events (reported_backups.h), whether or not its pod is still among `pods`; null: none.
  nlohmann::json reported_backup;
  // The last views of the job's pods that are gone from the API server (departed_pods.h): how
  // a gang pod that went while a failure waited for its gang ended.
  std::vector<PodView> departed;
  // Set for a job labelled kueue.x-k8s.io/queue-name (kueue_admission.h).
  std::optional<QueueObserved> queue;
  // The job's PodGroups (labelled with its name, gang_scheduling.h), by the apiVersion of each
  // PodGroup kind the operator watches; a kind it does not watch is absent.
  std::map<std::string, std::vector<nlohmann::json>> pod_groups;
  // The nodes the job's pods are bound to (spec.nodeName), by name, as the operator watches
  // them (TrimNodeForCache); a node it does not know (deleted, or not in its cache yet) is
  // absent. nullopt when the operator does not watch nodes (it may not list them): no rule
  // then judges a node.
  std::optional<std::map<std::string, nlohmann::json>> nodes;
  // The cluster's nodes that take new pods, as the operator watches them, by whether they
  // declare the feature in-place restarts need (node_view.h): what a new gang's choice reads
  // (ChooseInPlace). nullopt when the operator does not watch nodes, or when
  // ReconcilerOptions::restart_in_place is off (it is not read then).
  std::optional<InPlaceNodes> in_place_nodes;
  // Refusals of the job's earlier passes not yet said in its status, by the resource's plural
  // (networkpolicies, workloads).
  std::map<std::string, Refusal> refused;
  // Random, drawn for every pass; used when the rendezvous Secret has to be created. The
  // operator never reads Secrets: what it knows of the one it made is in the job's status
  // (rendezvousKeyHash), and a pod the kubelet cannot start without it says it is gone.
  std::string new_rendezvous_key;
  kube::WallTime now{};
};

struct Action {
  // kPatch: a merge patch (`object`) of `name`; kUpdateStatus: `object` written to the status
  // subresource (its resourceVersion the precondition).
  enum class Kind { kCreate, kDelete, kEvent, kDeleteJob, kPatch, kUpdateStatus };
  Kind kind = Kind::kEvent;
  kube::Resource resource;  // kCreate, kDelete, kPatch, kUpdateStatus
  std::string name;         // kDelete, kPatch
  nlohmann::json object;    // kCreate (but of a pod), kPatch, kUpdateStatus
  // kCreate of a pod: builds it (BuildPod from the pass's parsed spec, shared, not copied).
  // Pods are built when sent, so that a job of many replicas never has all of its pods in
  // memory at once; `object` then holds only the pod's name and its replica-type and
  // restart-count labels. ObjectOf() gives the object to send either way.
  std::function<nlohmann::json()> build;
  // kDelete: gracePeriodSeconds (none: the object's own), and a precondition on the object's
  // UID ("": none), so that a force deletion never removes a newer object of the same name.
  std::optional<int64_t> grace_period_seconds;
  std::string precondition_uid;
  std::string event_type;  // kEvent: Normal | Warning
  std::string reason;      // kEvent
  std::string message;     // kEvent
  // What the API server's errors mean for kPatch, kUpdateStatus and the kCreate of a Kueue
  // Workload (the executor's own rules judge the other creates and deletes):
  //   tolerated: answers that leave the action as good as done (404: the object is gone; 409:
  //     another writer came first, and its change brings the next pass);
  //   refusable: answers kept as a Refusal for the job's next pass (Observed::refused);
  //   warn_reason: set, any other error is a Warning Event of this reason and the pass goes
  //     on; empty, it fails the pass (retried with backoff).
  // `what` names the action in either ("marking Workload ns/w Finished"), `hint` says what to
  // do about an error the operator's permissions may cause.
  std::vector<int> tolerated, refusable;
  std::string warn_reason, what, hint;
};
// The object a kCreate action creates (built now, for a pod).
nlohmann::json ObjectOf(const Action& a);

struct Decision {
  std::vector<Action> actions;           // in order
  std::optional<nlohmann::json> status;  // the new .status, when it changed
  std::optional<std::chrono::milliseconds> requeue_after;
  // For the job counters.
  bool job_created = false, job_succeeded = false, job_failed = false, job_restarted = false;
  // For the goodput metrics, when the status changed: what this pass added to status.goodput
  // (time and steps lost, by cause; time queued) and its ratio.
  std::map<std::string, api::GoodputLoss> work_lost;
  double queued_seconds = 0;
  std::optional<double> goodput_ratio;
};

Decision Reconcile(const Observed& in, const ReconcilerOptions& options = {});

// How a finished pod ended, for restart decisions.
struct PodOutcome {
  bool failed = false;
  bool deleted = false;  // deleted, being deleted or evicted
  std::optional<int> exit_code;
  std::string reason;  // Evicted, Error, OOMKilled, ...
  // What the failure policy sees (restart_cause.h); kDeleted for a pod that is gone.
  api::RestartCause cause = api::RestartCause::kFailed;
};
PodOutcome OutcomeOf(const PodView& pod);
// Whether `policy` restarts a pod that ended as `o`.
bool IsRetryable(api::RestartPolicy policy, const PodOutcome& o);
// "pod fmnist-worker-1 exited with code 1" / "... was deleted" / "... was evicted".
std::string Describe(const std::string& pod, const PodOutcome& o);

}  // namespace tj::controller
