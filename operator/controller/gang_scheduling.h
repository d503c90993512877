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

#include "kube/resource.h"
#include "operator/api/training_job.h"

namespace tj::controller::gang {

inline const kube::Resource kNativePodGroups{"scheduling.k8s.io/v1beta1", "podgroups"};
inline const kube::Resource kVolcanoPodGroups{"scheduling.volcano.sh/v1beta1", "podgroups"};
inline const kube::Resource kCoschedulingPodGroups{"scheduling.x-k8s.io/v1alpha1", "podgroups"};

inline constexpr char kVolcanoGroupAnnotation[] = "scheduling.k8s.io/group-name";
inline constexpr char kVolcanoSchedulerName[] = "volcano";
inline constexpr char kCoschedulingGroupLabel[] = "scheduling.x-k8s.io/pod-group";

// The scheduler a job's gang gets: spec's gang with Auto resolved (Native when `native_served`,
// else None); nullopt for None.
enum class Kind { kNative, kVolcano, kCoscheduling };
inline constexpr Kind kKinds[] = {Kind::kNative, Kind::kVolcano, Kind::kCoscheduling};
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

}  // namespace tj::controller::gang
