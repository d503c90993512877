#include "operator/controller/gang_scheduling.h"

#include "kube/object_meta.h"
#include "operator/controller/job_resources.h"

namespace tj::controller::gang {

using nlohmann::json;

std::optional<Kind> KindFor(const api::TrainingJobSpec& spec, bool native_served) {
  switch (spec.run_policy.scheduling_policy.gang) {
    case api::GangScheduler::kAuto:
      return native_served ? std::optional<Kind>(Kind::kNative) : std::nullopt;
    case api::GangScheduler::kNone:
      return std::nullopt;
    case api::GangScheduler::kVolcano:
      return Kind::kVolcano;
    case api::GangScheduler::kCoscheduling:
      return Kind::kCoscheduling;
  }
  return std::nullopt;
}

const kube::Resource& ResourceOf(Kind kind) {
  switch (kind) {
    case Kind::kNative:
      return kNativePodGroups;
    case Kind::kVolcano:
      return kVolcanoPodGroups;
    case Kind::kCoscheduling:
      return kCoschedulingPodGroups;
  }
  return kNativePodGroups;
}

std::string PodGroupName(const std::string& job, int gang) {
  constexpr size_t kMaxLabel = 63;
  const std::string suffix = "-gang-" + std::to_string(gang);
  if (job.size() + suffix.size() <= kMaxLabel) return job + suffix;
  // "sha256:" and hex digits: 5 of them tell apart jobs whose names share the kept part.
  const std::string hash = KeyHash(job).substr(7, 5);
  std::string head = job.substr(0, kMaxLabel - suffix.size() - hash.size() - 1);
  while (!head.empty() && head.back() == '-') head.pop_back();
  return head + "-" + hash + suffix;
}

json BuildPodGroup(Kind kind, const json& job, const api::TrainingJobSpec& spec, int gang) {
  const api::ObjectRef ref = api::RefOf(job);
  const api::SchedulingPolicy& p = spec.run_policy.scheduling_policy;
  const int32_t min = p.min_available.value_or(spec.Replicas(api::ReplicaType::kChief) +
                                               spec.Replicas(api::ReplicaType::kWorker));
  json spec_out;
  switch (kind) {
    case Kind::kNative:
      spec_out = {{"schedulingPolicy", {{"gang", {{"minCount", min}}}}}};
      if (!p.priority_class.empty()) spec_out["priorityClassName"] = p.priority_class;
      break;
    case Kind::kVolcano:
      spec_out = {{"minMember", min}};
      if (!p.queue.empty()) spec_out["queue"] = p.queue;
      if (!p.priority_class.empty()) spec_out["priorityClassName"] = p.priority_class;
      break;
    case Kind::kCoscheduling:
      spec_out = {{"minMember", min}};
      if (p.schedule_timeout_seconds) {
        spec_out["scheduleTimeoutSeconds"] = *p.schedule_timeout_seconds;
      }
      break;
  }
  return {{"apiVersion", ResourceOf(kind).api_version},
          {"kind", "PodGroup"},
          {"metadata",
           {{"name", PodGroupName(ref.name, gang)},
            {"namespace", ref.ns},
            {"labels",
             {{api::kLabelJobName, ref.name}, {api::kLabelRestartCount, std::to_string(gang)}}},
            {"ownerReferences", json::array({OwnerReference(job)})}}},
          {"spec", spec_out}};
}

bool MarkMember(Kind kind, const std::string& group, json& pod) {
  const std::string type = kube::LabelOf(pod, api::kLabelReplicaType);
  if (type != api::TaskName(api::ReplicaType::kChief) &&
      type != api::TaskName(api::ReplicaType::kWorker)) {
    return false;
  }
  json& meta = pod["metadata"];
  json& spec = pod["spec"];
  switch (kind) {
    case Kind::kNative:
      spec["schedulingGroup"] = {{"podGroupName", group}};
      break;
    case Kind::kVolcano:
      if (!meta["annotations"].is_object()) meta["annotations"] = json::object();
      meta["annotations"][kVolcanoGroupAnnotation] = group;
      if (kube::TextOf(spec, "schedulerName").empty())
        spec["schedulerName"] = kVolcanoSchedulerName;
      break;
    case Kind::kCoscheduling:
      meta["labels"][kCoschedulingGroupLabel] = group;
      break;
  }
  return true;
}

}  // namespace tj::controller::gang
