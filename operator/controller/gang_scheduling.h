// All-or-nothing scheduling of a job's gang (docs/gangs.md). The gang is the chief and the
// workers, which train in one collective: a part of it holds nodes and makes no progress. The
// evaluator is not part of it (it is not in the collective, restarts alone, and a gang that fits
// without it should train).
//
// For each gang (each gang number, status.restartCount) the operator makes one PodGroup, owned by
// the job, and marks the gang's pods as its members, before it creates them:
//   - Auto, when the cluster serves scheduling.k8s.io/v1beta1 podgroups (Kubernetes 1.37 with
//     the GenericWorkload feature gate): a PodGroup with schedulingPolicy.gang.minCount; the
//     pods' spec.schedulingGroup.podGroupName names it. kube-scheduler's GangScheduling plugin
//     then binds none of them until it can bind minCount at once, and says why in the
//     PodGroup's condition PodGroupInitiallyScheduled;
//   - Volcano: a scheduling.volcano.sh/v1beta1 PodGroup (minMember, queue, priorityClassName);
//     the pods carry the annotation scheduling.k8s.io/group-name and schedulerName volcano
//     unless their template names a scheduler;
//   - Coscheduling (kubernetes-sigs/scheduler-plugins): a scheduling.x-k8s.io/v1alpha1
//     PodGroup (minMember, scheduleTimeoutSeconds); the pods carry the label
//     scheduling.x-k8s.io/pod-group.
// A pod's group is fixed once it exists (schedulingGroup is immutable), and a PodGroup's
// PodGroupInitiallyScheduled never turns back: a gang restart makes a new group,
// <job>-gang-<gang number>, and deletes the job's groups of earlier gangs.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "kube/client.h"
#include "kube/event_recorder.h"
#include "kube/object_cache.h"
#include "kube/resource.h"
#include "operator/api/training_job.h"
#include "operator/controller/reconciler.h"

namespace tj::controller::gang {

inline const kube::Resource kNativePodGroups{"scheduling.k8s.io/v1beta1", "podgroups"};
inline const kube::Resource kVolcanoPodGroups{"scheduling.volcano.sh/v1beta1", "podgroups"};
inline const kube::Resource kCoschedulingPodGroups{"scheduling.x-k8s.io/v1alpha1", "podgroups"};

inline constexpr char kVolcanoGroupAnnotation[] = "scheduling.k8s.io/group-name";
inline constexpr char kVolcanoSchedulerName[] = "volcano";
inline constexpr char kCoschedulingGroupLabel[] = "scheduling.x-k8s.io/pod-group";

// Whether the cluster serves the native PodGroup API (GET /apis/scheduling.k8s.io/v1beta1
// lists podgroups). An error only when the API server does not answer; a 404 is false.
StatusOr<bool> NativePodGroupsServed(kube::Client& client);

// The scheduler a job's gang gets: spec's gang with Auto resolved (Native when `native_served`,
// else None); nullopt for None.
enum class Kind { kNative, kVolcano, kCoscheduling };
std::optional<Kind> KindFor(const api::TrainingJobSpec& spec, bool native_served);
const kube::Resource& ResourceOf(Kind kind);

// "<job>-gang-<gang number>"; a job name that would make it longer than 63 characters (a
// label value, for Coscheduling) is cut and given 5 hex digits of its hash.
std::string PodGroupName(const std::string& job, int gang);

// The PodGroup of gang `gang` of `job`: labelled tjo.dev/job-name and
// tjo.dev/restart-count, owned by the job; its minimum is spec's minAvailable, else chief +
// workers.
nlohmann::json BuildPodGroup(Kind kind, const nlohmann::json& job, const api::TrainingJobSpec& spec,
                             int gang);

// Makes `pod` (as BuildPod made it) a member of PodGroup `group`. Only chief and worker pods
// are members: others are left as they are. True when it marked the pod.
bool MarkMember(Kind kind, const std::string& group, nlohmann::json& pod);

// The job's PodGroups of each kind as the operator watches them (informers on those labelled
// with a job's name, job_informers.h); null where it does not (the API is not served, or the
// operator may not list it): then they are read from the API server.
struct PodGroupCaches {
  const kube::ObjectCache* native = nullptr;
  const kube::ObjectCache* volcano = nullptr;
  const kube::ObjectCache* coscheduling = nullptr;
  const kube::ObjectCache* Of(Kind kind) const;
};

// Before the pods of a pass are created: when the decision creates chief or worker pods and the
// job's gang is scheduled together, marks them members of their gang's PodGroup and creates
// that PodGroup (one the job already owns is kept; one of that name it does not own is an
// error), then deletes the job's PodGroups of earlier gangs. An error (API server, RBAC, a
// PodGroup API the cluster does not serve) is also a Warning Event on the job; the pods are
// then not created, the pass is retried. Reads go to `caches` where they watch the kind: a
// PodGroup that exists already and the groups of earlier gangs (a group the cache does not
// show yet is read from the API server).
Status Prepare(kube::Client& client, kube::EventRecorder* recorder, const nlohmann::json& job,
               bool native_served, Decision* decision, const PodGroupCaches& caches = {});

}  // namespace tj::controller::gang
