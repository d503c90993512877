// What the operator's informer caches keep of each object (kube::InformerOptions::transform):
// only the fields the reconciler and the executor read, so the caches of a large cluster stay
// small. Pods are read through pod_view.h: a field ViewOfPod starts to read must be kept here
// too, and pod_view_test fails when it is not (the view of a trimmed pod must equal the view
// of the whole one).
#pragma once

#include <nlohmann/json.hpp>

namespace tj::controller {

// A pod as the operator reads it (pod_view.h): metadata without managedFields, annotations
// (but the rendezvous key's hash, kKeyHashAnnotation) and labels other than tjo.dev/...; of the
// spec only each container's name, --status-port argument and TJ_STATUS_PORT env (the status
// port), the node it is bound to and its tolerations; of the status the phase, reason, podIP,
// conditions (the scheduler's reason for a pending pod, DisruptionTarget) and each container
// status's name and state. Drops the rest of the args and env (TF_CONFIG), volumes and everything
// else: what stays of a pod does not grow with its template.
void TrimPodForCache(nlohmann::json& pod);

// What the cache keeps of a container: its name, a --status-port argument (as
// "--status-port=N") and a TJ_STATUS_PORT env entry.
nlohmann::json ContainerAsCached(const nlohmann::json& container);

// A pod template reduced to what the view (pod_view.h) of a pod built from it reads: its
// containers as cached, its nodeName and tolerations, of its metadata the timestamps,
// tjo.dev/... labels and the key hash.
// BuildPod from it gives a pod whose view equals that of the pod built from the whole
// template, without copying the template (the reconciler's view of the pods it creates).
nlohmann::json TemplateForView(const nlohmann::json& pod_template);

// A Node as the operator reads it (node_view.h): its name, uid and resourceVersion, its taints
// and spec.unschedulable, and of its status only the Ready condition's type, status, reason and
// lastTransitionTime, and of status.declaredFeatures only kRestartAllContainersFeature (the list
// dropped when it does not hold it). Its images, addresses, capacity, its other declared
// features and the heartbeat times of its conditions, most of a Node's bytes, are dropped; so a
// node informer's update that leaves what stays alone changes only the resourceVersion
// (OnlyVersionChanged).
void TrimNodeForCache(nlohmann::json& node);

// Whether `object` has a controller ownerReference to a TrainingJob (kind TrainingJob,
// apiVersion tjo.dev/...). The pod and Service informers keep nothing else
// (kube::InformerOptions::keep): an object that only wears a job's label, in any namespace,
// never enters their caches.
bool OwnedByATrainingJob(const nlohmann::json& object);
// That controller ownerReference of `object`; null when it has none.
const nlohmann::json* TrainingJobControllerRef(const nlohmann::json& object);

// Only what names an object and ties it to its job: name, namespace, uid, resourceVersion,
// generation, labels, ownerReferences, deletionTimestamp, and the kKeyHashAnnotation. For the
// Services and Secrets: only
// their existence and owner matter (one of the job's name that another owns is not the job's),
// and no Secret data stays in memory.
void KeepIdentity(nlohmann::json& object);

// A TrainingJob as the job cache keeps it: without managedFields, and each
// spec.replicaSpecs.<type>.template held as its JSON text (under kCompactTemplateKey) instead
// of a JSON tree. A template of many small fields (a long args list) costs about 9 times its
// text as a tree, and the cache holds every job for the operator's whole life: as text a
// job costs about its size. Idempotent; a job without templates is only stripped.
void CompactTrainingJob(nlohmann::json& job);

// Where CompactTrainingJob keeps a template's text in its replica spec. Not a field of the
// CRD's replica spec (the API server prunes unknown fields), so never a user's.
inline constexpr char kCompactTemplateKey[] = "tjo.dev/template-json";

// The job as the API server stores it (managedFields aside) from its compact form: a copy
// with each template parsed back (what a pass reads). A template text that does not parse
// (it cannot: the cache wrote it) is left out, and the spec's check then names the field.
nlohmann::json ExpandTrainingJob(const nlohmann::json& compact);

// The bytes of a job's template texts in its compact form: what a pass over it costs grows
// with this (each pass parses them, builds pods from them and sends them).
size_t CompactTemplateBytes(const nlohmann::json& compact);

// Whether an update changed nothing the reconciler reads: the two objects (as transformed
// above) differ in metadata.resourceVersion only, e.g. a pod condition written by the
// scheduler on a pod the cache keeps trimmed. A resync (same version)
// is not such an update.
bool OnlyVersionChanged(const nlohmann::json& old_obj, const nlohmann::json& new_obj);

// For pods: OnlyVersionChanged, or status.conditions changed too (written by the scheduler
// and the node: PodScheduled, Ready, ...). The reconciler acts on a pod's phase and container
// statuses; of the conditions it reads only PodScheduled=False's message, when a pod's startup
// deadline passes (a pass it schedules itself, which reads the cache as it is then). Under a
// burst of new jobs this spares one reconcile per pod the scheduler looks at.
bool OnlyVersionOrConditionsChanged(const nlohmann::json& old_pod, const nlohmann::json& new_pod);

}  // namespace tj::controller
