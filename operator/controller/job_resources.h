// The objects a TrainingJob owns, built from its spec: the headless Service, the rendezvous
// Secret and one Pod per replica with TF_CONFIG and the TJ_* environment. Pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "operator/api/training_job.h"

namespace tj::controller {

// The /status port the operator asks for: env TJ_STATUS_PORT=<8470 + n> on the container that
// gets TF_CONFIG, unless its template already sets TJ_STATUS_PORT or passes tj-trainer's
// --status-port; n is the replica's place in TF_CONFIG's cluster (chief, workers, evaluator),
// so pods that share a network namespace (on the process node) do not collide. The operator
// never adds arguments: a program's command and args reach it as written.
inline constexpr int kDefaultStatusPort = 8470;
inline constexpr char kStatusPortEnv[] = "TJ_STATUS_PORT";
// The pod annotation that names that port (a literal TJ_STATUS_PORT or --status-port):
// Prometheus' pod discovery finds the trainer's /metrics through it (the chart's PodMonitor).
inline constexpr char kStatusPortAnnotation[] = "tjo.dev/status-port";
// The container port whose number TF_CONFIG gives for a replica type, as Kubeflow's TFJob
// names it; without one, spec.port.
inline constexpr char kTfJobPortName[] = "tfjob-port";
inline constexpr char kRendezvousKeyField[] = "key";
// On the Secret and on every pod: a hash of the rendezvous key the pod was started with
// (KeyHash), so that a gang never runs with two keys (the reconciler restarts a gang whose
// pods carry another hash than the Secret).
inline constexpr char kKeyHashAnnotation[] = "tjo.dev/rendezvous-key-hash";
// On a chief or worker pod built with InPlaceRestartRules (BuildPod's `restart_in_place`), value
// "true": its gang chose to restart in place (ChooseInPlace), and a pod of the gang made later
// (one whose create failed) is made the same way, whatever the nodes say then.
inline constexpr char kLabelRestartInPlace[] = "tjo.dev/restart-in-place";
// The group of the pods' volumes unless the template sets one: the tj-trainer image's user.
inline constexpr int kDefaultFsGroup = 65532;

std::string PodName(const std::string& job, api::ReplicaType type, int index);
// The rendezvous Secret's name, "<job>-rendezvous-<the first 8 characters of its UID>" (or
// "<job>-rendezvous" for a job without one): no Secret of another job of the same name, earlier
// or later, nor one a user made before the job existed, can hold it, so one of this name that
// exists is this job's own (Executor::CreateSecret).
std::string SecretName(const api::ObjectRef& job);

// {"apiVersion", "kind", "name", "uid", "controller": true, "blockOwnerDeletion": true}.
nlohmann::json OwnerReference(const nlohmann::json& job);
// True when `object` has a controller owner reference to `job` (by uid when both have one).
bool IsOwnedBy(const nlohmann::json& object, const nlohmann::json& job);

// The port of replica type `type` in TF_CONFIG: its TF_CONFIG container's port named
// "tfjob-port" (as TFJob reads it), else spec.port.
int ReplicaPort(const api::TrainingJobSpec& spec, api::ReplicaType type);

// TF_CONFIG of replica (type, index): every replica of the job in "cluster" (evaluator
// included, as TensorFlow expects), hosts "<pod>.<job>.<ns>.svc:<port of its type>".
nlohmann::json TfConfig(const api::ObjectRef& job, const api::TrainingJobSpec& spec,
                        api::ReplicaType type, int index);

// The security settings trainer pods get where their template leaves them unset (a value the
// template sets wins, field by field): pod runAsNonRoot true, seccompProfile RuntimeDefault,
// fsGroup kDefaultFsGroup (so that a claim's volume is writable by the non-root trainer) and
// automountServiceAccountToken false (a trainer never talks to the API server); per container,
// init containers included, allowPrivilegeEscalation false and capabilities drop ALL. The
// tj-trainer image runs as a non-root UID; a template that needs root sets runAsNonRoot: false
// itself.
void ApplySecurityDefaults(nlohmann::json& pod_spec);

// "sha256:" and the first 16 hex digits of SHA-256(key): names a key without revealing it.
std::string KeyHash(const std::string& key);
// The kKeyHashAnnotation of a Secret or pod; "" when it has none (made by an older operator).
std::string KeyHashOf(const nlohmann::json& object);

nlohmann::json BuildService(const nlohmann::json& job, const api::TrainingJobSpec& spec);
// The Secret carries the key and its kKeyHashAnnotation.
nlohmann::json BuildSecret(const nlohmann::json& job, const std::string& key);
// `key_hash`: the KeyHash of the Secret's key the pod will read (its kKeyHashAnnotation); ""
// leaves the annotation out. `gang`: the gang number the pod belongs to (status.restartCount;
// its label tjo.dev/restart-count and env TJ_RESTART_COUNT). `restart_in_place`: the pod gets
// the label kLabelRestartInPlace, and its TF_CONFIG container InPlaceRestartRules (unless its
// template sets a restartPolicy of its own).
nlohmann::json BuildPod(const nlohmann::json& job, const api::TrainingJobSpec& spec,
                        api::ReplicaType type, int index, int gang,
                        const std::string& key_hash = "", bool restart_in_place = false);

// An elastic job's capacity probe for worker `index` (docs/elastic.md): `<job>-probe-<index>`,
// the worker's pod as BuildPod makes it, asking the scheduler for the same room (resources,
// node selection, affinity, tolerations, volumes, host ports, priority) and running nothing:
// its containers sleep, without the trainer's environment; no init containers, no probes, no
// grace period, no gang membership. Labelled kLabelCapacityProbe, not as a replica.
nlohmann::json BuildCapacityProbe(const nlohmann::json& job, const api::TrainingJobSpec& spec,
                                  int index);
std::string CapacityProbeName(const std::string& job, int index);

// The container-level restartPolicy and restartPolicyRules (Kubernetes 1.35+, the action
// RestartAllContainers 1.36+) with which the kubelet restarts every container of a gang pod in
// place when its trainer exits as `policy` retries (ExitCode: 75, the trainer's "peer lost",
// and 128+n, a signal; OnFailure and Always: any code but 0). Every pod of the gang restarts:
// the one whose trainer failed, and the others, whose trainers then lose a peer and exit 75.
// Null for Never, which restarts nothing.
nlohmann::json InPlaceRestartRules(api::RestartPolicy policy);

// The container that gets TF_CONFIG, found as TFJob finds it: the one named "tensorflow", else
// the one named "trainer" (this operator's own name), else the only one; -1 if none.
int TrainerContainerIndex(const nlohmann::json& pod_spec);
// The same rule over a list of named entries (spec.containers, status.containerStatuses).
int TrainerIndexAmong(const nlohmann::json& containers);
// The value of --status-port N or --status-port=N in a container's args (the last one; ""
// when absent).
std::string StatusPortArg(const nlohmann::json& container);
// The /status port of `pod`'s TF_CONFIG container: its --status-port argument (which overrides
// the env in tj-trainer), else its literal TJ_STATUS_PORT; nullopt when absent, 0 or invalid.
std::optional<int> StatusPortOf(const nlohmann::json& pod);

}  // namespace tj::controller
