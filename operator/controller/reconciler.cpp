// Reconcile(): one Pass over the job, and the pass's skeleton: Run lists the rules in the order
// they apply, each defined in the file of its family (reconciler_pass.h lists them).
#include "operator/controller/reconciler.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "kube/object_meta.h"
#include "operator/controller/cache_transforms.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler_pass.h"

namespace tj::controller {

using nlohmann::json;
namespace cond = api::condition;

namespace reconcile {

using std::chrono::milliseconds;

milliseconds Until(kube::WallTime now, kube::WallTime t) {
  auto d = std::chrono::duration_cast<milliseconds>(t - now);
  return std::max(d, milliseconds(0)) + milliseconds(1);
}

Pass::Pass(const Observed& observed, const ReconcilerOptions& options)
    : observed_(observed),
      options_(options),
      ref_(api::RefOf(observed.job)),
      job_identity_(std::make_shared<const json>(
          json{{"metadata", {{"name", ref_.name}, {"namespace", ref_.ns}, {"uid", ref_.uid}}}})) {
  status_ = api::TrainingJobStatus::FromJson(observed.job.value("status", json::object()));
  original_status_ = status_.ToJson();
  // The spec this pass reads (API conventions: status.observedGeneration).
  if (const json* m = observed.job.contains("metadata") ? &observed.job["metadata"] : nullptr;
      m != nullptr && m->is_object() && m->contains("generation") &&
      (*m)["generation"].is_number_integer()) {
    status_.observed_generation = (*m)["generation"].get<int64_t>();
  }
  for (const auto& p : observed.pods) {
    if (!IsOwnedBy(p, observed.job)) continue;  // a foreign pod wearing our label: not ours
    pods_.push_back(ViewOfPod(p));
  }
  if (observed.nodes) {
    for (const auto& [name, node] : *observed.nodes) nodes_[name] = ViewOfNode(node);
  }
}

// The rules, in the order they apply. A step that returns true has decided the pass.
Decision Pass::Run() {
  // Whatever else holds: a pod stuck terminating on a lost node keeps its name from the next
  // gang, and a job deleted in the foreground waits for it.
  ForceDeletePodsOfLostNodes();
  if (kube::IsBeingDeleted(observed_.job)) {
    return std::move(decision_);  // the garbage collector removes what it owns
  }
  if (!ParseSpecOrFail()) return End();
  SizeTheGang();
  if (status_.Finished()) {
    DeleteCapacityProbes();  // whatever cleanPodPolicy says: they hold room and do nothing
    FinishWorkload();
    CleanUp();
    // replicaStatuses stay as they were when the job finished: cleanup deleting pods does
    // not rewrite how the replicas ended.
    return End();
  }
  if (AwaitAdmission()) return End();
  NoteAdmittedSize();
  MarkCreated();
  if (SuspendOrResume()) return EndCountingReplicas();
  if (!status_.start_time) status_.start_time = kube::FormatTime(observed_.now);
  if (!observed_.service) Create(kube::resources::kServices, BuildService(observed_.job, spec_));
  EnsureNetworkPolicy();
  EnsureSecret();
  if (FailPastActiveDeadline()) return EndCountingReplicas();

  const Gang gang = SortPodsAndDeleteStale();
  ReplaceEvaluatorOnLostNode(gang);
  if (RestartForANewKey(gang)) return EndCountingReplicas();
  const GangCensus census = TakeCensus(gang);
  NoteWholeGangCreated(gang, census);
  if (SucceedOnceTrained(gang, census)) return EndCountingReplicas();
  if (ChargeInPlaceRestarts(gang)) return EndCountingReplicas();
  if (RestartForLostNodes(gang, census)) return EndCountingReplicas();
  if (FailOrRestartGang(gang, census)) return EndCountingReplicas();
  CreateMissingPods(gang, census);
  SuperviseEvaluator(gang);
  if (ShrinkWhenUnschedulable(gang, census)) return EndCountingReplicas();
  if (MarkRunningOrFailStartup(census)) return EndCountingReplicas();
  if (GrowWhenThereIsRoom(gang, census)) return EndCountingReplicas();
  NoteTrainingStep(census);
  if (RestartIfStalled(gang, census)) return EndCountingReplicas();

  CopyProgress();
  // Poll while a trainer runs (status.progress); pending pods are watched, not polled.
  if (std::any_of(pods_.begin(), pods_.end(),
                  [](const PodView& p) { return p.phase == "Running"; })) {
    RequeueAfter(options_.progress_poll);
  }
  return EndCountingReplicas();
}

void Pass::Event(const std::string& type, const std::string& reason, const std::string& message) {
  Action a;
  a.kind = Action::Kind::kEvent;
  a.event_type = type;
  a.reason = reason;
  a.message = message;
  decision_.actions.push_back(std::move(a));
}

void Pass::Create(const kube::Resource& resource, json object) {
  Action a;
  a.kind = Action::Kind::kCreate;
  a.resource = resource;
  a.name = api::RefOf(object).name;
  a.object = std::move(object);
  decision_.actions.push_back(std::move(a));
}

void Pass::CreatePod(ReplicaType type, int index, int gang, bool in_place) {
  // A member of the gang's PodGroup (GroupTheGang) when it is of the gang: MarkMember leaves
  // the evaluator out.
  const std::optional<std::pair<gang::Kind, std::string>> group = gang_group_;
  in_place = in_place && type != ReplicaType::kEvaluator;
  auto build = [spec = std::shared_ptr<const api::TrainingJobSpec>(spec_holder_),
                job = job_identity_, type, index, gang, hash = key_hash_, group, in_place] {
    json pod = BuildPod(*job, *spec, type, index, gang, hash, in_place);
    if (group) gang::MarkMember(group->first, group->second, pod);
    return pod;
  };
  // The view from the pod built from the templates as the view reads them (no copy of a
  // large template per replica).
  const json pod = BuildPod(*job_identity_, ViewSpec(), type, index, gang, key_hash_, in_place);
  created_pods_.push_back(ViewOfPod(pod));
  Action a;
  a.kind = Action::Kind::kCreate;
  a.resource = kube::resources::kPods;
  a.name = api::RefOf(pod).name;
  // The pod's identity for those who sort the actions before they are sent (the gang's
  // PodGroup): its name and the two labels that place it. ObjectOf() builds the pod.
  const json& labels = pod["metadata"]["labels"];
  a.object = {{"metadata",
               {{"name", a.name},
                {"labels",
                 {{api::kLabelReplicaType, labels.value(api::kLabelReplicaType, "")},
                  {api::kLabelRestartCount, labels.value(api::kLabelRestartCount, "")}}}}}};
  a.build = std::move(build);
  decision_.actions.push_back(std::move(a));
}

void Pass::DeletePod(const PodView& pod) {
  if (!pod.being_deleted) Delete(kube::resources::kPods, pod.name);
}

void Pass::Delete(const kube::Resource& resource, const std::string& name) {
  Action a;
  a.kind = Action::Kind::kDelete;
  a.resource = resource;
  a.name = name;
  decision_.actions.push_back(std::move(a));
}

void Pass::RequeueAfter(milliseconds delay) {
  if (!decision_.requeue_after || delay < *decision_.requeue_after) {
    decision_.requeue_after = delay;
  }
}

void Pass::RequeueAt(kube::WallTime time) { RequeueAfter(Until(observed_.now, time)); }

const api::TrainingJobSpec& Pass::ViewSpec() {
  if (!view_spec_) {
    std::map<ReplicaType, json> full;  // moved out while the rest of the spec is copied
    for (auto& [t, rs] : spec_.replica_specs) {
      full[t] = std::exchange(rs.pod_template, json::object());
    }
    view_spec_ = std::make_unique<api::TrainingJobSpec>(spec_);
    for (auto& [t, rs] : spec_.replica_specs) {
      rs.pod_template = std::move(full[t]);
      view_spec_->replica_specs[t].pod_template = TemplateForView(rs.pod_template);
    }
  }
  return *view_spec_;
}

Decision Pass::EndCountingReplicas() {
  CountReplicas();
  return End();
}

Decision Pass::End() {
  // Every condition holds as of the spec this pass read: stamp them all with its generation.
  for (auto& c : status_.conditions) c.observed_generation = status_.observed_generation;
  json now = status_.ToJson();
  if (now != original_status_) {
    // Written anyway: the ratio is brought up to date with it (never a write of its own).
    UpdateGoodputRatio();
    decision_.status = status_.ToJson();
    const api::Goodput was = api::Goodput::FromJson(original_status_.value("goodput", json()));
    for (const auto& [cause, loss] : status_.goodput.lost) {
      const api::GoodputLoss before =
          was.lost.count(cause) ? was.lost.at(cause) : api::GoodputLoss{};
      if (loss.seconds > before.seconds || loss.steps > before.steps) {
        decision_.work_lost[cause] = {loss.restarts - before.restarts,
                                      loss.seconds - before.seconds, loss.steps - before.steps};
      }
    }
    decision_.queued_seconds = status_.goodput.queued_seconds - was.queued_seconds;
    decision_.goodput_ratio = status_.goodput.ratio;
  }
  return std::move(decision_);
}

}  // namespace reconcile

json ObjectOf(const Action& a) { return a.build ? a.build() : a.object; }

Decision Reconcile(const Observed& in, const ReconcilerOptions& options) {
  // Another controller's job (spec.managedBy): nothing of it is this operator's to create,
  // delete or write, not even its status (a malformed one included).
  if (!api::OtherManager(in.job).empty()) return Decision{};
  try {
    return reconcile::Pass(in, options).Run();
  } catch (const std::exception& e) {
    // Nothing a user sends may crash the operator: a malformed object ends here.
    Decision d;
    api::TrainingJobStatus s = api::TrainingJobStatus::FromJson(
        in.job.is_object() && in.job.contains("status") ? in.job["status"] : json::object());
    if (!s.IsTrue(cond::kFailed)) {
      const std::string msg = std::string("the operator cannot process this object: ") + e.what();
      s.SetCondition(cond::kFailed, true, "InvalidSpec", msg, in.now);
      d.status = s.ToJson();
      Action a;
      a.event_type = "Warning";
      a.reason = "InvalidSpec";
      a.message = msg;
      d.actions.push_back(a);
      d.job_failed = true;
    }
    return d;
  }
}

}  // namespace tj::controller
