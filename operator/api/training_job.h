// The TrainingJob API (group tjo.dev, version v1alpha1): typed spec parsed from the object's
// JSON with defaults and validation (errors name the field: "spec.replicaSpecs.Worker.replicas:
// must be >= 1"), the status and its conditions. Pure values; no I/O. Thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "kube/resource.h"
#include "kube/time_format.h"
#include "operator/api/failure_policy.h"
#include "operator/api/goodput.h"

namespace tj::api {

inline constexpr char kGroup[] = "tjo.dev";
inline constexpr char kApiVersion[] = "tjo.dev/v1alpha1";
inline constexpr char kKind[] = "TrainingJob";
inline const kube::Resource kTrainingJobs{"tjo.dev/v1alpha1", "trainingjobs"};

// spec.managedBy (as batch/v1 Job's, Kubernetes 1.30+): the controller that runs a job. Unset,
// empty or this name: this operator; any other value hands the job to that controller (a
// MultiKueue dispatcher, a test harness), and this operator creates nothing for it and writes
// no status. The CRD keeps the field immutable.
inline constexpr char kControllerName[] = "tjo.dev/tj-operator";

// The controller `job` names in spec.managedBy when that is not this operator; "" when this
// operator runs the job. A value that is not a string (which the CRD refuses) names no
// controller the operator could run for: it is returned as JSON text, and the job left alone.
std::string OtherManager(const nlohmann::json& job);

// Labels on every object a job owns.
inline constexpr char kLabelJobName[] = "tjo.dev/job-name";
inline constexpr char kLabelReplicaType[] = "tjo.dev/replica-type";
inline constexpr char kLabelReplicaIndex[] = "tjo.dev/replica-index";
// The gang number (status.restartCount when the pod was made): which gang a pod belongs to.
inline constexpr char kLabelRestartCount[] = "tjo.dev/restart-count";
// On an elastic job's capacity probe (docs/elastic.md): the worker index it holds room for.
inline constexpr char kLabelCapacityProbe[] = "tjo.dev/capacity-probe";

// Ordered as TensorFlow lists them in TF_CONFIG.
enum class ReplicaType { kChief, kWorker, kEvaluator };
enum class RestartPolicy { kNever, kOnFailure, kExitCode, kAlways };
enum class CleanPodPolicy { kAll, kRunning, kNone };
enum class SuccessPolicy { kChief, kAllWorkers };

std::string ToString(ReplicaType t);  // "Chief", "Worker", "Evaluator" (spec keys)
std::string TaskName(ReplicaType t);  // "chief", "worker", "evaluator" (TF_CONFIG, pod names)
std::optional<ReplicaType> ParseReplicaType(const std::string& s);  // either spelling
std::string ToString(RestartPolicy p);
std::string ToString(CleanPodPolicy p);
std::string ToString(SuccessPolicy p);

struct ReplicaSpec {
  int32_t replicas = 1;
  RestartPolicy restart_policy = RestartPolicy::kExitCode;
  nlohmann::json pod_template = nlohmann::json::object();  // a core/v1 PodTemplateSpec
};

// The longest duration the run policy keeps (100 years): a longer activeDeadlineSeconds,
// ttlSecondsAfterFinished or startupDeadlineSeconds is accepted and saturated to it, so that a
// time plus a duration stays inside the clock's range (system_clock counts nanoseconds, which
// wrap after 292 years).
inline constexpr int64_t kMaxDurationSeconds = int64_t{100} * 365 * 24 * 3600;

// The most workers a job may have. Every replica's TF_CONFIG lists every replica's address
// (up to ~195 bytes each with the longest names), and Linux refuses to start a program with an
// environment string over 128 KiB (MAX_ARG_STRLEN): 512 workers, a chief and an evaluator make
// a TF_CONFIG of at most ~100 KiB. The operator builds N pods of O(N) bytes each per gang.
// tests/unit/operator/controller/replica_limit_test.cpp builds the largest job and checks both.
inline constexpr int32_t kMaxWorkers = 512;

// spec.runPolicy.schedulingPolicy (docs/gangs.md): whether and how the gang (the chief and the
// workers; the evaluator is not part of it) is scheduled all or nothing.
enum class GangScheduler {
  kAuto,          // Kubernetes' own PodGroup when the cluster serves it, else none
  kNone,          // pods scheduled one by one
  kVolcano,       // a Volcano PodGroup; pods annotated scheduling.k8s.io/group-name
  kCoscheduling,  // a scheduler-plugins PodGroup; pods labelled scheduling.x-k8s.io/pod-group
};
std::string ToString(GangScheduler g);  // "Auto", "None", "Volcano", "Coscheduling"

struct SchedulingPolicy {
  GangScheduler gang = GangScheduler::kAuto;
  // The pods the scheduler must place together; unset: the whole gang (chief + workers).
  std::optional<int32_t> min_available;
  std::string queue;           // Volcano's queue
  std::string priority_class;  // the PodGroup's priorityClassName (native, Volcano)
  std::optional<int32_t> schedule_timeout_seconds;  // the coscheduling plugin's
};

struct RunPolicy {
  int32_t backoff_limit = 3;
  std::optional<int64_t> active_deadline_seconds;
  std::optional<int64_t> ttl_seconds_after_finished;
  CleanPodPolicy clean_pod_policy = CleanPodPolicy::kRunning;
  bool suspend = false;
  std::optional<int64_t> startup_deadline_seconds;
  // The job's global step may stay the same this long while its gang runs; then the gang
  // restarts with the cause Stalled. Judged only once the chief reports a step.
  std::optional<int64_t> progress_deadline_seconds;
  SchedulingPolicy scheduling_policy;
};

// spec.elasticPolicy (docs/elastic.md): the workers a gang may have. The first gang has the
// Worker replicas; a gang whose pods cannot all be scheduled within scheduleTimeoutSeconds
// restarts with fewer, never below minReplicas; while it has fewer than maxReplicas, capacity
// probes find when there is room for more, and the gang restarts larger (as it does at any
// other restart, up to maxReplicas). The trainer keeps the global batch at `shards` shards
// whatever the size (TJ_ELASTIC_SHARDS): a size trains only when its replica count (workers,
// plus a chief) divides `shards`.
struct ElasticPolicy {
  int32_t min_replicas = 1;
  int32_t max_replicas = 1;
  int64_t schedule_timeout_seconds = 60;
  int32_t shards = 1;  // default: maxReplicas plus the chief

  // Whether a gang of `workers` workers (and `chiefs` chiefs) trains the shards.
  bool Trains(int32_t workers, int32_t chiefs) const;
  // The largest worker count in [minReplicas, at_most] that trains the shards; nullopt: none.
  std::optional<int32_t> LargestSizeUpTo(int32_t at_most, int32_t chiefs) const;
};

// The most shards an elastic job may ask for: each is a batch every step computes.
inline constexpr int32_t kMaxElasticShards = 4096;

struct TrainingJobSpec {
  std::map<ReplicaType, ReplicaSpec> replica_specs;  // Worker always present once parsed
  std::optional<ElasticPolicy> elastic;              // spec.elasticPolicy
  RunPolicy run_policy;
  SuccessPolicy success_policy = SuccessPolicy::kChief;
  int32_t port = 2222;
  FailurePolicy failure_policy;  // which restart causes count against backoffLimit

  // Number of replicas of `t` (0 when the type is absent).
  int32_t Replicas(ReplicaType t) const;
  // ChiefReplicaType of this spec.
  ReplicaType ChiefType() const;
};

// The replica type whose pod 0 speaks for the job: its /status is the job's progress, its
// exit decides success under SuccessPolicy Chief. Chief when the job has Chief replicas, else
// Worker (TFJob's rule; that pod is the chief in TF_CONFIG's sense too). The executor, which
// polls before the spec is parsed, applies it to the pods it sees: a Chief pod, else worker 0.
ReplicaType ChiefReplicaType(int32_t chief_replicas);

// Parses `spec` (the object's .spec), applies defaults and validates. The error names the
// first offending field and what a valid value is.
StatusOr<TrainingJobSpec> ParseSpec(const nlohmann::json& spec);

// Whether `name` (the job's metadata.name) makes valid names of what the operator creates from
// it: the headless Service `<name>` (a DNS-1035 label: lowercase letters, digits and '-',
// starting with a letter, ending with a letter or digit, at most 63 characters), the label
// value tjo.dev/job-name (at most 63) and the pods' hostnames `<name>-<type>-<index>` (DNS-1123
// labels of at most 63 characters: with 10 workers, a name of at most 52). The API server
// accepts longer TrainingJob names (up to 253, with dots); the error names the limit.
Status ValidateJobName(const std::string& name, const TrainingJobSpec& spec);

// Condition types and the reasons the operator writes.
namespace condition {
inline constexpr char kCreated[] = "Created";
inline constexpr char kRunning[] = "Running";
inline constexpr char kRestarting[] = "Restarting";
inline constexpr char kSucceeded[] = "Succeeded";
inline constexpr char kFailed[] = "Failed";
inline constexpr char kSuspended[] = "Suspended";
// Set by operators before the rendezvous Secret's name carried the job's UID (a Secret of the
// job's name that they had not made); removed from a job's status by the reconciler.
inline constexpr char kRendezvousSecretConflict[] = "RendezvousSecretConflict";
// True while the API server refuses to create the job's pods, with its message: reason
// Forbidden (403: the namespace's Pod Security Admission level, a ResourceQuota, an admission
// webhook) or Invalid (422: e.g. a privileged container where the cluster disallows them); the
// create is retried with the queue's backoff. False (PodsCreated) once the pods are made.
inline constexpr char kPodCreateRefused[] = "PodCreateRefused";
// True while the API server refuses the job's NetworkPolicy (network_policy.h), or one of its
// name exists that the job does not own: the job runs, but its pods are not isolated from the
// other pods of the cluster; the message says why and what to do. The create is tried again
// (ReconcilerOptions::network_policy_retry). False (NetworkPolicyCreated) once it exists.
inline constexpr char kNetworkPolicyRefused[] = "NetworkPolicyRefused";
// A job queued in Kueue (label kueue.x-k8s.io/queue-name, docs/kueue.md): False while Kueue
// decides, with Kueue's reason and message (the quota it lacks); True once it admitted the
// gang. While it is False and no lifecycle condition holds, the job's state is Queued.
inline constexpr char kAdmitted[] = "Admitted";
}  // namespace condition

// status.state of a job that waits for Kueue's admission (the State column of `kubectl get tj`).
inline constexpr char kQueuedState[] = "Queued";

struct Condition {
  std::string type;
  std::string status;  // "True" | "False"
  std::string reason;
  std::string message;
  std::string last_transition_time;  // metav1.Time
  std::string last_update_time;
  int64_t observed_generation = 0;  // the job's metadata.generation it was set from; 0: unknown
};

struct ReplicaStatus {
  int32_t active = 0, succeeded = 0, failed = 0;
  bool operator==(const ReplicaStatus&) const = default;
};

struct TrainingJobStatus {
  std::vector<Condition> conditions;
  std::map<std::string, ReplicaStatus> replica_statuses;  // keyed "Worker", "Evaluator", ...
  // status.restartCount: the gang number. The first gang of chief and workers is 0, each gang
  // restart makes the next; its pods carry it as kLabelRestartCount and TJ_RESTART_COUNT.
  // (Members of these structs are named after the JSON keys, which users read.)
  int32_t restart_count = 0;
  // status.createdGeneration: the gang number for which every chief/worker pod was created; -1:
  // not (yet) for the current gang. A chief/worker pod missing while this equals restart_count
  // was deleted by someone. ("Generation" here is the key's name, not metadata.generation.)
  int32_t created_generation = -1;
  int32_t evaluator_restarts = 0;  // the evaluator's own restarts (also bounded by backoffLimit)
  RestartCounts restarts;          // status.restarts: by cause, and how much backoffLimit is used
  // The hash (controller::KeyHash) of the key of the rendezvous Secret the operator created
  // last; "" before it did. The operator never reads Secrets: this is what it knows of one.
  std::string rendezvous_key_hash;
  std::optional<std::string> start_time, completion_time;
  // status.firstFailureTime: when the operator first saw a chief or worker pod of the current
  // gang fail or go. The gang's failure is judged once every pod of it has ended, or the
  // settle time (ReconcilerOptions::failure_settle) after this; cleared by a gang restart.
  std::optional<std::string> first_failure_time;
  // status.progressTime: when the current gang's global step (from its chief's /status) was
  // last seen to change, or first seen (RFC 3339); what runPolicy.progressDeadlineSeconds is
  // measured from. Cleared when the gang restarts.
  std::optional<std::string> progress_time;
  // status.elastic.workers: the worker count of the current gang of an elastic job (its
  // pods, TF_CONFIG and PodGroup have that many); unset: spec.elasticPolicy.maxReplicas.
  std::optional<int32_t> elastic_workers;
  Goodput goodput;            // status.goodput, written once it is not empty
  nlohmann::json progress;    // null or {epoch, totalEpochs, step, loss, accuracy, ...}
  nlohmann::json evaluation;  // null or {checkpoint, epoch, loss, accuracy}
  std::string state;          // the printer column: last true condition of the lifecycle
  // The job's metadata.generation this status was computed from (API conventions); SetCondition
  // stamps it on the conditions it sets. 0: unknown, not written.
  int64_t observed_generation = 0;

  // Lenient: unknown or malformed fields are dropped (the operator owns status).
  static TrainingJobStatus FromJson(const nlohmann::json& j);
  nlohmann::json ToJson() const;

  const Condition* Find(const std::string& type) const;
  bool IsTrue(const std::string& type) const;
  bool Finished() const { return IsTrue(condition::kSucceeded) || IsTrue(condition::kFailed); }
  // Finished() of the job's status as stored, reading its conditions only (the status is
  // parsed once per pass, by the reconciler; the executor asks this before it).
  static bool FinishedIn(const nlohmann::json& job);
  // Sets a condition, with observed_generation; lastTransitionTime changes only when `status`
  // flips. Returns true when anything changed. Keeps `state` in step.
  bool SetCondition(const std::string& type, bool status, const std::string& reason,
                    const std::string& message, kube::WallTime now);
  // SetCondition, but a False condition that never held is written too: one that says why
  // the job waits (Admitted=False).
  bool SetWaitingCondition(const std::string& type, const std::string& reason,
                           const std::string& message, kube::WallTime now);
};

// Object metadata the operator needs.
struct ObjectRef {
  std::string name, ns, uid;
};
ObjectRef RefOf(const nlohmann::json& object);

}  // namespace tj::api
