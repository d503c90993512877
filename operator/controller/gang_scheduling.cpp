#include "operator/controller/gang_scheduling.h"

#include <set>
#include <vector>

#include "kube/object_meta.h"
#include "kube/server_version.h"
#include "operator/controller/job_resources.h"

namespace tj::controller::gang {

using nlohmann::json;

StatusOr<bool> NativePodGroupsServed(kube::Client& client) {
  return kube::Serves(client, kNativePodGroups);
}

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

const kube::ObjectCache* PodGroupCaches::Of(Kind kind) const {
  switch (kind) {
    case Kind::kNative:
      return native;
    case Kind::kVolcano:
      return volcano;
    case Kind::kCoscheduling:
      return coscheduling;
  }
  return nullptr;
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

namespace {

// Creates `group` (of `r`, watched in `cache` or null) unless the job already owns it.
Status Ensure(kube::Client& client, const kube::ObjectCache* cache, const kube::Resource& r,
              const json& job, const json& group) {
  const api::ObjectRef ref = api::RefOf(job);
  const std::string name = group["metadata"]["name"];
  const std::string what = r.plural + "." + r.api_version + " " + ref.ns + "/" + name;
  auto created = client.Create(r, ref.ns, group);
  if (created.ok()) return Status::Ok();
  if (kube::IsAlreadyExists(created.error())) {
    std::optional<json> seen =
        cache != nullptr ? cache->Get(kube::ObjectKey(ref.ns, name)) : std::nullopt;
    if (!seen) {  // not watched, or not in the cache yet
      auto existing = client.Get(r, ref.ns, name);
      if (!existing.ok()) return existing.error().ToStatus().WithContext("reading " + what);
      seen = std::move(*existing);
    }
    if (IsOwnedBy(*seen, job)) return Status::Ok();
    return Status::Error(what +
                         " exists and this job does not own it: delete it, or give the job "
                         "another name; the gang's pods are not created until then");
  }
  if (kube::IsNotFound(created.error())) {
    return Status::Error("creating " + what + ": the cluster does not serve " + r.api_version +
                         " " + r.plural +
                         " (install that scheduler, or set spec.runPolicy.schedulingPolicy.gang "
                         "to None or Auto)");
  }
  if (created.error().code == 403) {
    return Status::Error(
        "creating " + what + ": forbidden (" + created.error().message +
        "): the operator's ClusterRole needs create, get, list, watch and delete on "
        "podgroups of " +
        r.api_version.substr(0, r.api_version.find('/')) + " (the Helm chart grants them)");
  }
  return created.error().ToStatus().WithContext("creating " + what);
}

// The job's PodGroups of `r`: from `cache` where it is watched, else listed.
StatusOr<std::vector<json>> GroupsOf(kube::Client& client, const kube::ObjectCache* cache,
                                     const kube::Resource& r, const api::ObjectRef& ref) {
  std::vector<json> out;
  if (cache != nullptr) {
    for (const kube::ObjectCache::Ptr& g : cache->ListShared()) {
      if (kube::TextOf(kube::MetadataOf(*g), "namespace") == ref.ns &&
          kube::LabelOf(*g, api::kLabelJobName) == ref.name) {
        out.push_back(*g);
      }
    }
    return out;
  }
  kube::ListOptions o;
  o.label_selector = std::string(api::kLabelJobName) + "=" + ref.name;
  auto groups = client.List(r, ref.ns, o);
  if (!groups.ok()) {
    return groups.error().ToStatus().WithContext("listing the PodGroups of TrainingJob " + ref.ns +
                                                 "/" + ref.name);
  }
  for (json& g : (*groups)["items"]) out.push_back(std::move(g));
  return out;
}

// Deletes the job's PodGroups of `r` of gangs before gang number `gang`.
Status DeleteEarlier(kube::Client& client, const kube::ObjectCache* cache, const kube::Resource& r,
                     const json& job, int gang) {
  const api::ObjectRef ref = api::RefOf(job);
  auto groups = GroupsOf(client, cache, r, ref);
  if (!groups.ok()) return groups.status();
  for (const json& g : *groups) {
    if (!IsOwnedBy(g, job) || kube::IsBeingDeleted(g)) continue;
    const std::string n = kube::LabelOf(g, api::kLabelRestartCount);
    if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(n) >= gang) {
      continue;
    }
    const std::string name = kube::TextOf(kube::MetadataOf(g), "name");
    auto d = client.Delete(r, ref.ns, name);
    if (!d.ok() && !kube::IsNotFound(d.error())) {
      return d.error().ToStatus().WithContext("deleting PodGroup " + ref.ns + "/" + name +
                                              " of an earlier gang");
    }
  }
  return Status::Ok();
}

}  // namespace

Status Prepare(kube::Client& client, kube::EventRecorder* recorder, const json& job,
               bool native_served, Decision* decision, const PodGroupCaches& caches) {
  const json spec_json = job.value("spec", json::object());
  // A spec the reconciler refused creates no pod; a job that creates none needs no group.
  bool creates_gang = false;
  for (const Action& a : decision->actions) {
    if (a.kind != Action::Kind::kCreate || a.resource.plural != kube::resources::kPods.plural) {
      continue;
    }
    const std::string type = kube::LabelOf(a.object, api::kLabelReplicaType);
    creates_gang = creates_gang || type == api::TaskName(api::ReplicaType::kChief) ||
                   type == api::TaskName(api::ReplicaType::kWorker);
  }
  if (!creates_gang) return Status::Ok();
  auto spec = api::ParseSpec(spec_json);
  if (!spec.ok()) return Status::Ok();
  const std::optional<Kind> kind = KindFor(*spec, native_served);
  if (!kind) return Status::Ok();

  std::set<int> gangs;
  for (Action& a : decision->actions) {
    if (a.kind != Action::Kind::kCreate || a.resource.plural != kube::resources::kPods.plural) {
      continue;
    }
    const std::string n = kube::LabelOf(a.object, api::kLabelRestartCount);
    const int gang = n.empty() ? 0 : std::stoi(n);
    const std::string group = PodGroupName(api::RefOf(job).name, gang);
    if (!MarkMember(*kind, group, a.object)) continue;
    gangs.insert(gang);
    if (a.build) {  // a pod built when sent (reconciler.h): marked as it is built
      a.build = [build = std::move(a.build), k = *kind, group] {
        json pod = build();
        MarkMember(k, group, pod);
        return pod;
      };
    }
  }
  Status s = Status::Ok();
  for (int gang : gangs) {
    s = Ensure(client, caches.Of(*kind), ResourceOf(*kind), job,
               BuildPodGroup(*kind, job, *spec, gang));
    if (!s.ok()) break;
  }
  if (s.ok() && !gangs.empty() && *gangs.rbegin() > 0) {
    s = DeleteEarlier(client, caches.Of(*kind), ResourceOf(*kind), job, *gangs.rbegin());
  }
  if (!s.ok() && recorder != nullptr) {
    recorder->RecordAsync(job, "Warning", "PodGroupFailed", s.message());
  }
  return s;
}

}  // namespace tj::controller::gang
