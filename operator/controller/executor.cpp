#include "operator/controller/executor.h"

#include <algorithm>
#include <future>
#include <utility>

#include "common/utf8.h"
#include "kube/object_meta.h"
#include "operator/api/training_job.h"
#include "operator/controller/cache_transforms.h"
#include "operator/controller/gang_scheduling.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/kueue_admission.h"
#include "operator/controller/network_policy.h"
#include "operator/controller/slow_start.h"
#include "operator/controller/tenant_reads.h"

namespace tj::controller {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// The cache of `r`'s objects; null for a resource the executor does not cache.
const kube::ObjectCache* CacheOf(const ExecutorDeps& deps, const kube::Resource& r) {
  const OwnedObjectCaches& caches = deps.caches;
  if (r.plural == kube::resources::kPods.plural) return caches.pods;
  if (r.plural == kube::resources::kServices.plural) return caches.services;
  if (r.plural == kube::resources::kNetworkPolicies.plural) return caches.network_policies;
  if (r.plural == api::kTrainingJobs.plural) return caches.jobs;
  if (r.plural == kueue::kWorkloads.plural && r.api_version == kueue::kWorkloads.api_version) {
    return deps.kueue.workloads;
  }
  for (gang::Kind kind : gang::kKinds) {
    if (r.api_version == gang::ResourceOf(kind).api_version && r.plural == "podgroups") {
      return deps.pod_groups.Of(kind);
    }
  }
  return nullptr;
}

// The object `name` of `r` in `ns` from `cache` when it is watched (nullopt: none), else from
// the API server (nullopt: 404).
kube::Result<std::optional<json>> ReadFrom(kube::Client& client, const kube::ObjectCache* cache,
                                           const kube::Resource& r, const std::string& ns,
                                           const std::string& name) {
  if (cache != nullptr) return cache->Get(kube::ObjectKey(ns, name));
  auto got = client.Get(r, ns, name);
  if (got.ok()) return std::optional<json>(std::move(*got));
  if (kube::IsNotFound(got.error())) return std::optional<json>();
  return got.error();
}

bool Among(const std::vector<int>& codes, int code) {
  return std::find(codes.begin(), codes.end(), code) != codes.end();
}

// The owners of `object`, for a message: "TrainingJob mnist (uid u-1)", or "no owner".
std::string OwnersOf(const json& object) {
  std::string out;
  const json md = object.value("metadata", json::object());
  for (const json& ref : md.value("ownerReferences", json::array())) {
    if (!ref.is_object()) continue;
    if (!out.empty()) out += ", ";
    out += ref.value("kind", "?") + " " + ref.value("name", "?") + " (uid " +
           ref.value("uid", "?") + ")";
  }
  return out.empty() ? "no owner" : out;
}

// Leaves out a Service of the job's name that the job does not own (a deleted job's, or a
// user's): the reconciler then creates it, and Create's owner check waits for it to go.
void DropUnowned(Observed* in) {
  if (in->service && !IsOwnedBy(*in->service, in->job)) in->service.reset();
  if (in->network_policy && !IsOwnedBy(*in->network_policy, in->job)) in->network_policy.reset();
}

}  // namespace

size_t ParallelPodCreates(const json& job, size_t pods) {
  if (pods <= 1) return 1;
  const size_t bytes =
      std::max<size_t>(1, job.dump(-1, ' ', false, json::error_handler_t::replace).size());
  return std::clamp<size_t>(kMaxPodBytesInFlight / bytes, 1, kMaxParallelCreates);
}

json StatusWriteOf(const json& job) {
  const json& md = kube::MetadataOf(job);
  json out = {{"apiVersion", job.value("apiVersion", api::kApiVersion)},
              {"kind", job.value("kind", api::kKind)},
              {"metadata", json::object()}};
  for (const char* k : {"name", "namespace", "uid", "resourceVersion"}) {
    if (auto it = md.find(k); it != md.end()) out["metadata"][k] = *it;
  }
  return out;
}

Status CheckExistingIsOwned(const std::string& kind, const std::string& object_key,
                            const std::optional<json>& existing, const json& job) {
  if (existing && IsOwnedBy(*existing, job)) return Status::Ok();
  std::string why;
  if (!existing) {
    why = "it was deleted meanwhile; creating it again on the next pass";
  } else {
    why = "it belongs to " + OwnersOf(*existing) +
          (kube::IsBeingDeleted(*existing)
               ? " and is being deleted (e.g. a deleted TrainingJob of the same name); waiting "
                 "for it to go"
               : "; delete or rename it, or rename this job");
  }
  return Status::Error(kind + " " + object_key + " already exists and is not this job's: " + why);
}

void Executor::ReadTrainerProgress(const std::string& ns, const std::string& name, Observed* in) {
  // The reconciler reads the chief's (api::ChiefReplicaType: the Chief pod, else worker 0) and
  // the evaluator's: only those are asked, at once, each bounded (HttpGetJson), never every pod
  // of a large job.
  std::optional<PodView> chief, worker0, evaluator;
  for (const auto& p : in->pods) {
    const std::string pod = api::RefOf(p).name;
    if (pod == PodName(name, api::ReplicaType::kChief, 0)) chief = ViewOfPod(p);
    if (pod == PodName(name, api::ReplicaType::kWorker, 0)) worker0 = ViewOfPod(p);
    if (pod == PodName(name, api::ReplicaType::kEvaluator, 0)) evaluator = ViewOfPod(p);
  }
  if (!chief) chief = std::move(worker0);  // ChiefReplicaType's rule, told by the pods
  std::vector<std::pair<std::string, std::future<std::optional<json>>>> polls;
  for (const std::optional<PodView>* p : {&chief, &evaluator}) {
    if (!*p || (*p)->phase != "Running") continue;
    if (deps_.status_poller != nullptr) {  // never waits on the pod
      if (auto s = deps_.status_poller->Latest(ns + "/" + name, **p))
        in->trainer_status[(*p)->name] = std::move(*s);
      continue;
    }
    if (!deps_.trainer_status) continue;
    polls.emplace_back((*p)->name,
                       std::async(std::launch::async, deps_.trainer_status, std::cref(**p)));
  }
  for (auto& [pod, answer] : polls) {
    if (auto s = answer.get()) in->trainer_status[pod] = std::move(*s);
  }
  if (!deps_.pod_log) return;
  // Both exit right after their last word: read it from the log (at most its last 64 KiB), so
  // that a finished job shows its last epoch and evaluation, not whatever a poll last saw.
  if (chief && chief->phase == "Succeeded") {
    if (auto log = deps_.pod_log(ns, chief->name, chief->trainer_container)) {
      json p = FinalProgress(*log);
      if (!p.is_null()) in->trainer_status[chief->name] = std::move(p);
    }
  }
  if (evaluator && evaluator->phase == "Succeeded") {
    if (auto log = deps_.pod_log(ns, evaluator->name, evaluator->trainer_container)) {
      json e = LastEvaluation(*log);
      if (!e.is_null()) in->final_evaluation[evaluator->name] = std::move(e);
    }
  }
}

bool LargePassBudget::TryTake(const std::string& key, size_t bytes, Clock::TimePoint now,
                              size_t* taken) {
  *taken = 0;
  if (bytes <= kLargeJobBytes) return true;
  const size_t want = std::min(bytes, kLargePassBytes);
  MutexLock lock(mu_);
  // Those that stopped asking lose their turn.
  std::erase_if(waiting_, [&](const Waiter& w) {
    return w.key != key && now - w.last_asked > kLargePassForgetAfter;
  });
  auto mine =
      std::find_if(waiting_.begin(), waiting_.end(), [&](const Waiter& w) { return w.key == key; });
  const bool my_turn = waiting_.empty() || mine == waiting_.begin();
  if (!my_turn || in_use_ + want > kLargePassBytes) {
    if (mine == waiting_.end()) {
      waiting_.push_back({key, now});
    } else {
      mine->last_asked = now;
    }
    return false;
  }
  if (mine != waiting_.end()) waiting_.erase(mine);
  in_use_ += want;
  *taken = want;
  return true;
}

void LargePassBudget::Give(size_t taken) {
  MutexLock lock(mu_);
  in_use_ -= std::min(taken, in_use_);
}

size_t LargePassBudget::in_use() const {
  MutexLock lock(mu_);
  return in_use_;
}

Executor::Executor(ExecutorDeps deps, ReconcilerOptions options)
    : deps_(std::move(deps)),
      options_(std::move(options)),
      clock_(deps_.clock != nullptr ? deps_.clock : RealClock::Get()),
      expectations_(clock_, kExpectationsTtl) {}

std::optional<Executor::KeptStatus> Executor::Kept(const std::string& key, const std::string& uid) {
  MutexLock lock(kept_mu_);
  auto it = kept_.find(key);
  if (it == kept_.end()) return std::nullopt;
  if (it->second.uid != uid) {  // an earlier job of the same name: its status went with it
    kept_.erase(it);
    return std::nullopt;
  }
  return it->second;
}

void Executor::Keep(const std::string& key, KeptStatus kept) {
  MutexLock lock(kept_mu_);
  kept_[key] = std::move(kept);
}

void Executor::ForgetKept(const std::string& key) {
  MutexLock lock(kept_mu_);
  kept_.erase(key);
}

int Executor::WriteKeptStatuses() {
  std::map<std::string, KeptStatus> kept;
  {
    MutexLock lock(kept_mu_);
    kept.swap(kept_);
  }
  int written = 0;
  for (const auto& [key, k] : kept) {
    std::optional<json> job = deps_.caches.jobs->Get(key);
    if (!job) {  // not cached (deleted since, or the cache is listing again): ask
      const auto [ns, name] = kube::SplitObjectKey(key);
      auto live = deps_.client->Get(api::kTrainingJobs, ns, name);
      if (live.ok()) job = std::move(*live);
    }
    if (!job || api::RefOf(*job).uid != k.uid) continue;  // gone
    Status s = WriteStatus(key, *job, k.status);
    if (s.ok()) {
      ++written;
    } else if (deps_.log != nullptr) {
      deps_.log->Warn(s.message());
    }
  }
  return written;
}

void Executor::ReadOwned(const std::string& ns, const std::string& name, Observed* in) {
  const OwnedObjectCaches& c = deps_.caches;
  for (auto& p : c.pods->ByIndex(kube::ObjectCache::kLabelIndex,
                                 std::string(api::kLabelJobName) + "=" + name)) {
    if (api::RefOf(p).ns == ns) in->pods.push_back(std::move(p));
  }
  in->service = c.services->Get(ns + "/" + name);
  if (c.network_policies != nullptr) {
    in->network_policy = c.network_policies->Get(ns + "/" + NetworkPolicyName(name));
  }
  DropUnowned(in);
}

StatusOr<std::optional<milliseconds>> Executor::Sync(const std::string& key) {
  const auto [ns, name] = kube::SplitObjectKey(key);

  // Wait until the caches show what the previous pass created and deleted; the informer
  // events that bring it enqueue the key again, the TTL bounds the wait.
  const OwnedObjectCaches& caches = deps_.caches;
  auto wait =
      expectations_.Pending(key, [this](const kube::Resource& r, const std::string& object_key) {
        const kube::ObjectCache* cache = CacheOf(deps_, r);
        return cache != nullptr ? cache->GetShared(object_key) : nullptr;
      });
  if (wait) {
    return std::optional<milliseconds>(std::chrono::duration_cast<milliseconds>(*wait) +
                                       milliseconds(1));
  }

  Observed in;
  kube::ObjectCache::Ptr cached = caches.jobs->GetShared(key);
  if (!cached) {
    expectations_.Clear(key);
    ForgetKept(key);
    if (deps_.metrics) deps_.metrics->ForgetJob(ns, name);
    return std::optional<milliseconds>();  // deleted
  }
  // Another controller's job (spec.managedBy): not even its pods are read, nor its trainers
  // asked for their progress. The field is immutable, so nothing here can change that.
  if (!api::OtherManager(*cached).empty()) {
    ForgetKept(key);
    return std::optional<milliseconds>();
  }
  // A large job's pass waits for its share of the budget (LargePassBudget), without holding
  // its worker.
  size_t budget = 0;
  if (!large_passes_.TryTake(key, CompactTemplateBytes(*cached), clock_->Now(), &budget)) {
    return std::optional<milliseconds>(kLargePassRetry);
  }
  struct GiveBack {
    LargePassBudget* b;
    size_t n;
    ~GiveBack() { b->Give(n); }
  } give_back{&large_passes_, budget};
  // The cache keeps the templates as text (CompactTrainingJob); the pass reads them parsed.
  in.job = ExpandTrainingJob(*cached);
  cached.reset();
  // A status kept back from an earlier pass is this pass's starting point, as if written.
  const std::string uid = api::RefOf(in.job).uid;
  const std::optional<KeptStatus> kept = Kept(key, uid);
  if (kept) in.job["status"] = kept->status;
  in.now = deps_.wall_clock();
  ReadOwned(ns, name, &in);
  if (deps_.reported_backups != nullptr) in.reported_backup = deps_.reported_backups->Newest(key);
  if (deps_.departed_pods != nullptr) in.departed = deps_.departed_pods->Of(key, uid);
  if (!kueue::QueueName(in.job).empty()) TJ_RETURN_IF_ERROR(ReadQueue(ns, &in));
  ReadPodGroups(ns, name, &in);
  ReadNodes(&in);
  SayInPlaceChoice(in.in_place_nodes);
  in.refused = TakeRefusals(key);
  if (deps_.random_key) in.new_rendezvous_key = deps_.random_key();
  if (!api::TrainingJobStatus::FinishedIn(in.job)) ReadTrainerProgress(ns, name, &in);

  Decision d = Reconcile(in, options_);

  if (Status applied = Apply(key, in.job, d); !applied.ok()) {
    TJ_RETURN_IF_ERROR(WritePassRefusals(key, in.job));
    return applied;
  }
  // The new status, or the kept one still unwritten.
  std::optional<json> status = d.status ? d.status
                               : kept   ? std::optional<json>(kept->status)
                                        : std::nullopt;
  if (status) {
    const Clock::TimePoint now = clock_->Now();
    const Clock::TimePoint since = kept ? kept->since : now;
    if (deps_.defer_status && now - since < kMaxStatusDelay && deps_.defer_status->busy(key)) {
      Keep(key, KeptStatus{uid, std::move(*status), since});
      deps_.defer_status->write_later(
          key, std::chrono::duration_cast<milliseconds>(kMaxStatusDelay - (now - since)) +
                   milliseconds(1));
    } else {
      TJ_RETURN_IF_ERROR(WriteStatus(key, in.job, *status));
      ForgetKept(key);  // kept until written: a failed write is retried from it
    }
  }
  if (deps_.metrics) {
    if (d.job_created) deps_.metrics->JobCreated(ns);
    if (d.job_succeeded) deps_.metrics->JobSucceeded(ns);
    if (d.job_failed) deps_.metrics->JobFailed(ns);
    if (d.job_restarted) deps_.metrics->JobRestarted(ns);
    for (const auto& [cause, lost] : d.work_lost) {
      deps_.metrics->WorkLost(ns, cause, lost.seconds, lost.steps);
    }
    if (d.queued_seconds > 0) deps_.metrics->Queued(ns, d.queued_seconds);
    if (d.goodput_ratio) deps_.metrics->SetGoodputRatio(ns, name, *d.goodput_ratio);
  }
  // A refusal of this pass is said by the next one, at once.
  if (Refused(key)) return std::optional<milliseconds>(milliseconds(1));
  return d.requeue_after;
}

Status Executor::ReadQueue(const std::string& ns, Observed* in) {
  QueueObserved q;
  q.watched = deps_.kueue.workloads != nullptr;
  kube::Client& client = *deps_.client;
  const std::string name = kueue::WorkloadName(in->job);
  auto workload = ReadFrom(client, deps_.kueue.workloads, kueue::kWorkloads, ns, name);
  if (!workload.ok()) {
    return workload.error().ToStatus().WithContext("reading Workload " + ns + "/" + name +
                                                   " of TrainingJob " +
                                                   kube::ObjectKey(ns, api::RefOf(in->job).name));
  }
  q.workload = std::move(*workload);
  if (q.workload) {
    for (const std::string& f : kueue::AssignedFlavors(*q.workload)) {
      auto rf = ReadFrom(client, deps_.kueue.flavors, kueue::kResourceFlavors, "", f);
      if (!rf.ok()) return rf.error().ToStatus().WithContext("reading ResourceFlavor " + f);
      if (*rf) q.flavors[f] = std::move(**rf);  // a missing one: the rules name it
    }
  } else if (const std::string pc = kube::LabelOf(in->job, kueue::kPriorityClassLabel);
             !pc.empty()) {
    auto wpc =
        ReadFrom(client, deps_.kueue.priority_classes, kueue::kWorkloadPriorityClasses, "", pc);
    if (wpc.ok()) {
      q.priority_class = std::move(*wpc);
    } else if (wpc.error().code == 403) {
      q.priority_class_error = wpc.error().message;
    } else {
      return wpc.error().ToStatus().WithContext("reading WorkloadPriorityClass " + pc);
    }
  }
  in->queue = std::move(q);
  return Status::Ok();
}

void Executor::ReadPodGroups(const std::string& ns, const std::string& name, Observed* in) const {
  for (gang::Kind kind : gang::kKinds) {
    const kube::ObjectCache* cache = deps_.pod_groups.Of(kind);
    if (cache == nullptr) continue;
    std::vector<json>& groups = in->pod_groups[gang::ResourceOf(kind).api_version];
    for (auto& g : cache->ByIndex(kube::ObjectCache::kLabelIndex,
                                  std::string(api::kLabelJobName) + "=" + name)) {
      if (api::RefOf(g).ns == ns) groups.push_back(std::move(g));
    }
  }
}

void IndexNodesForInPlace(kube::ObjectCache& nodes) {
  nodes.AddIndex(kNodeInPlaceIndex, [](const json& node) {
    const NodeView v = ViewOfNode(node);
    if (!TakesNewPods(v)) return std::vector<std::string>{};
    return std::vector<std::string>{v.restarts_all_containers ? kNodeDeclares : kNodeLacks};
  });
}

InPlaceNodes CountInPlaceNodes(const kube::ObjectCache& nodes) {
  InPlaceNodes n;
  n.declaring = static_cast<int64_t>(nodes.CountByIndex(kNodeInPlaceIndex, kNodeDeclares));
  n.lacking = static_cast<int64_t>(nodes.CountByIndex(kNodeInPlaceIndex, kNodeLacks));
  for (std::string& name : nodes.KeysByIndex(kNodeInPlaceIndex, kNodeLacks, 1)) {
    n.a_lacking = std::move(name);
  }
  return n;
}

void Executor::SayInPlaceChoice() {
  if (!options_.restart_in_place) return;
  SayInPlaceChoice(deps_.nodes != nullptr ? std::optional(CountInPlaceNodes(*deps_.nodes))
                                          : std::nullopt);
}

void Executor::SayInPlaceChoice(const std::optional<InPlaceNodes>& nodes) {
  if (!options_.restart_in_place) return;
  const InPlaceChoice choice = ChooseInPlace(nodes);
  {
    MutexLock lock(in_place_mu_);
    if (in_place_said_ == choice.because) return;
    in_place_said_ = choice.because;
  }
  if (deps_.log != nullptr) {
    deps_.log->Emit({{"event", "restart_in_place"}, {"enabled", choice.on}, {"why", choice.why}});
  }
}

void Executor::ReadNodes(Observed* in) const {
  if (deps_.nodes == nullptr) return;
  if (options_.restart_in_place) in->in_place_nodes = CountInPlaceNodes(*deps_.nodes);
  in->nodes.emplace();
  for (const json& pod : in->pods) {
    const std::string node = NodeNameOf(pod);
    if (node.empty() || in->nodes->contains(node)) continue;
    if (auto n = deps_.nodes->Get(node)) (*in->nodes)[node] = std::move(*n);
  }
}

void Executor::Refuse(const std::string& key, const std::string& plural, Refusal refusal) {
  MutexLock lock(refusals_mu_);
  refusals_[key][plural] = std::move(refusal);
}

bool Executor::Refused(const std::string& key) {
  MutexLock lock(refusals_mu_);
  return refusals_.count(key) > 0;
}

std::map<std::string, Refusal> Executor::TakeRefusals(const std::string& key) {
  MutexLock lock(refusals_mu_);
  auto it = refusals_.find(key);
  if (it == refusals_.end()) return {};
  std::map<std::string, Refusal> out = std::move(it->second);
  refusals_.erase(it);
  return out;
}

Status Executor::Send(const std::string& key, const json& job, const Action& a) {
  const std::string ns = api::RefOf(job).ns;
  const std::string object_key = ns + "/" + a.name;
  kube::Client& client = *deps_.client;
  const bool expect = a.kind == Action::Kind::kCreate && CacheOf(deps_, a.resource) != nullptr;
  if (expect) expectations_.ExpectCreate(key, a.resource, object_key);
  kube::Result<json> r =
      a.kind == Action::Kind::kPatch
          ? client.Patch(a.resource, ns, a.name, kube::PatchType::kMerge, a.object)
      : a.kind == Action::Kind::kUpdateStatus ? client.UpdateStatus(a.resource, ns, a.object)
                                              : client.Create(a.resource, ns, a.object);
  if (r.ok()) return Status::Ok();
  if (expect) expectations_.Forget(key, a.resource, object_key);
  const kube::ApiError& e = r.error();
  if (Among(a.tolerated, e.code)) return Status::Ok();
  if (Among(a.refusable, e.code)) {
    Refuse(key, a.resource.plural,
           Refusal{e.code, tj::Utf8Prefix(e.message, 512), deps_.wall_clock()});
    return Status::Ok();
  }
  const std::string what = a.what.empty() ? a.resource.plural + " " + object_key : a.what;
  if (!a.warn_reason.empty()) {
    if (deps_.recorder) {
      deps_.recorder->RecordAsync(job, "Warning", a.warn_reason,
                                  what + ": " + tj::Utf8Prefix(e.message, 512) + a.hint);
    }
    return Status::Ok();
  }
  return e.ToStatus().WithContext(what + a.hint);
}

StatusOr<std::optional<json>> Executor::ReadExisting(const kube::Resource& r, const std::string& ns,
                                                     const std::string& name) {
  const kube::ObjectCache* cache = CacheOf(deps_, r);
  if (cache != nullptr) {
    if (auto cached = cache->Get(ns + "/" + name)) return std::optional<json>(std::move(*cached));
  }
  // Not cached (yet, or not labelled as a job's, so no informer of ours lists it): ask.
  auto live = deps_.client->Get(r, ns, name);
  if (live.ok()) return std::optional<json>(std::move(*live));
  if (kube::IsNotFound(live.error())) return std::optional<json>();
  return live.error().ToStatus().WithContext("reading " + r.plural + " " + ns + "/" + name +
                                             ", which already exists");
}

// The operator may create and delete Secrets, never read them (RBAC: no get, list or watch).
// The reconciler creates the rendezvous Secret only when it has made none (by the job's
// status) or a pod reports it gone. Its name carries the job's UID (SecretName), so one that
// exists then is this job's own: made by a pass whose status write was lost (a pod create
// failed after it, or the operator stopped and another leader took over), or planted under
// the job's name by someone who could create Secrets in its namespace after the job existed.
// Unable to read its key, the operator replaces it with the new one: pods that read the old
// key restart with the gang (RestartForANewKey), and no pod ever reads a planted key.
Status Executor::CreateSecret(const std::string& ns, const Action& a) {
  const std::string object_key = ns + "/" + a.name;
  // A job without a UID (none the API server serves) has a name without one: never replaced.
  const json owners =
      a.object.value("metadata", json::object()).value("ownerReferences", json::array());
  const bool uid_scoped =
      !owners.empty() && owners[0].is_object() && !owners[0].value("uid", "").empty();
  auto r = deps_.client->Create(a.resource, ns, a.object);
  if (!r.ok() && kube::IsAlreadyExists(r.error()) && uid_scoped) {
    auto d = deps_.client->Delete(a.resource, ns, a.name);
    if (!d.ok() && !kube::IsNotFound(d.error())) {
      return d.error().ToStatus().WithContext("replacing secrets " + object_key +
                                              ", which holds a key this pass did not make");
    }
    r = deps_.client->Create(a.resource, ns, a.object);
  }
  if (r.ok()) return Status::Ok();
  return r.error().ToStatus().WithContext("creating secrets " + object_key);
}

Status Executor::WritePassRefusals(const std::string& key, const json& job) {
  std::optional<CreateRefusal> refusal;
  {
    MutexLock lock(refusals_mu_);
    if (auto it = create_refusals_.find(key); it != create_refusals_.end()) {
      refusal = std::move(it->second);
      create_refusals_.erase(it);
    }
  }
  if (!refusal) return Status::Ok();
  return WritePassRefused(key, job, api::condition::kPodCreateRefused, refusal->reason,
                          refusal->message);
}

Status Executor::WritePassRefused(const std::string& key, const json& job, const char* type,
                                  const std::string& reason, const std::string& message) {
  api::TrainingJobStatus st = api::TrainingJobStatus::FromJson(job.value("status", json::object()));
  if (!st.SetCondition(type, true, reason, message, deps_.wall_clock())) return Status::Ok();
  return WriteStatus(key, job, st.ToJson());
}

Status Executor::CreateNetworkPolicy(const std::string& key, const json& job, const Action& a) {
  const std::string ns = api::RefOf(job).ns;
  const std::string object_key = ns + "/" + a.name;
  expectations_.ExpectCreate(key, a.resource, object_key);
  auto r = deps_.client->Create(a.resource, ns, a.object);
  if (r.ok()) return Status::Ok();
  const kube::ApiError& e = r.error();
  std::string why;
  if (kube::IsAlreadyExists(e)) {
    StatusOr<std::optional<json>> existing = ReadExisting(a.resource, ns, a.name);
    Status owned = existing.ok() ? CheckExistingIsOwned("NetworkPolicy", object_key, *existing, job)
                                 : existing.status();
    if (owned.ok()) return owned;
    // Gone meanwhile, going, or a deleted job's of the same name that the garbage collector
    // has yet to remove (it selects the same pods meanwhile): waited for, as a Service is.
    if (!existing.ok() || !*existing || kube::IsBeingDeleted(**existing) ||
        OwnedByATrainingJob(**existing)) {
      expectations_.Forget(key, a.resource, object_key);
      return owned;
    }
    why = owned.message();  // a user's, say: the job runs without its own
  } else if (e.code == 400 || e.code == 403 || kube::IsInvalid(e)) {
    why = "the API server refused NetworkPolicy " + object_key + ": " +
          tj::Utf8Prefix(e.message, 512) +
          " (the operator's RBAC in this namespace, or an admission webhook)";
  } else {
    // Not a refusal (the API server unreachable or overloaded, a timeout): the pass fails and
    // is retried with the queue's backoff, the job's pods waiting for their policy.
    expectations_.Forget(key, a.resource, object_key);
    return e.ToStatus().WithContext("creating networkpolicies " + object_key);
  }
  expectations_.Forget(key, a.resource, object_key);
  Refuse(key, a.resource.plural, Refusal{e.code, why, deps_.wall_clock()});
  return Status::Ok();
}

Status Executor::Create(const std::string& key, const json& job, const Action& a) {
  const api::ObjectRef ref = api::RefOf(job);
  if (a.resource.plural == kube::resources::kSecrets.plural) return CreateSecret(ref.ns, a);
  if (a.resource.plural == kube::resources::kNetworkPolicies.plural) {
    return CreateNetworkPolicy(key, job, a);
  }
  if (!a.refusable.empty() || !a.tolerated.empty()) return Send(key, job, a);
  const std::string object_key = ref.ns + "/" + a.name;
  // Waited for in the cache, where one shows it (a PodGroup of a kind not watched is not).
  const bool expect = CacheOf(deps_, a.resource) != nullptr;
  if (expect) expectations_.ExpectCreate(key, a.resource, object_key);
  std::string kind;
  auto r = [&] {
    // A pod is built now and dropped once sent (Action::build).
    const json object = ObjectOf(a);
    kind = kube::TextOf(object, "kind");
    return deps_.client->Create(a.resource, ref.ns, object);
  }();
  if (kind.empty()) kind = a.resource.plural;
  if (r.ok()) return Status::Ok();
  if (kube::IsAlreadyExists(r.error())) {
    // Usually ours, created by an earlier pass that the cache does not show yet. But it may be
    // another's: a pod, Service or Secret of a deleted job of the same name that is still
    // terminating or not yet collected (counted as ours, a pod would look deleted once it
    // goes and restart the new job's gang; a Secret would hand out the old rendezvous key), or
    // a user's object of the same name. Such an object is waited for, the key retried.
    StatusOr<std::optional<json>> existing = ReadExisting(a.resource, ref.ns, a.name);
    Status owned =
        existing.ok() ? CheckExistingIsOwned(kind, object_key, *existing, job) : existing.status();
    if (owned.ok()) return owned;
    if (expect) expectations_.Forget(key, a.resource, object_key);
    return owned;
  }
  if (expect) expectations_.Forget(key, a.resource, object_key);
  if (deps_.recorder) {
    deps_.recorder->RecordAsync(
        job, "Warning", "CreateFailed",
        "creating " + a.resource.plural + " " + a.name + ": " + r.error().message + a.hint);
  }
  if ((r.error().code == 403 || kube::IsInvalid(r.error())) &&
      a.resource.plural == kube::resources::kPods.plural) {
    // The cluster refuses this pod as the template makes it (or refuses the operator): said
    // in a condition, retried with the queue's backoff.
    const bool forbidden = r.error().code == 403;
    MutexLock lock(refusals_mu_);
    auto [it, first] = create_refusals_.try_emplace(key);
    if (first || object_key < it->second.pod) {
      it->second = {object_key, forbidden ? "Forbidden" : "Invalid",
                    "the API server refused pod " + object_key + ": " +
                        tj::Utf8Prefix(r.error().message, 512) +
                        (forbidden ? " (the namespace's Pod Security Admission level, a "
                                     "ResourceQuota, an admission webhook, or the operator's "
                                     "RBAC there)"
                                   : " (the pod template, as this cluster validates it)") +
                        "; change the pod template or the namespace's policy; retried with "
                        "backoff"};
    }
  }
  return r.error().ToStatus().WithContext("creating " + a.resource.plural + " " + object_key +
                                          a.hint);
}

// A run of creates: the objects pods need (the Service, the Secret) together, then the pods
// in slow-start batches (slow_start.h).
Status Executor::CreateAll(const std::string& key, const json& job,
                           const std::vector<const Action*>& creates) {
  std::vector<std::function<Status()>> first, pods;
  for (const Action* a : creates) {
    auto& into = a->resource.plural == kube::resources::kPods.plural ? pods : first;
    into.push_back([this, &key, &job, a] { return Create(key, job, *a); });
  }
  TJ_RETURN_IF_ERROR(RunSlowStart(first, 0));
  return RunSlowStart(pods, kFirstPodBatch, ParallelPodCreates(job, pods.size()));
}

Status Executor::Apply(const std::string& key, const json& job, const Decision& d) {
  const api::ObjectRef ref = api::RefOf(job);
  kube::Client* c = deps_.client;
  for (size_t i = 0; i < d.actions.size(); ++i) {
    const Action& a = d.actions[i];
    switch (a.kind) {
      case Action::Kind::kCreate: {
        std::vector<const Action*> creates;
        for (; i < d.actions.size() && d.actions[i].kind == Action::Kind::kCreate; ++i) {
          creates.push_back(&d.actions[i]);
        }
        --i;  // the loop's ++i moves past the run
        TJ_RETURN_IF_ERROR(CreateAll(key, job, creates));
        break;
      }
      case Action::Kind::kDelete: {
        const std::string object_key = ref.ns + "/" + a.name;
        std::string uid;
        const kube::ObjectCache* cache = CacheOf(deps_, a.resource);
        if (auto cached = cache != nullptr ? cache->GetShared(object_key) : nullptr) {
          uid = api::RefOf(*cached).uid;
        }
        expectations_.ExpectDelete(key, a.resource, object_key, uid);
        kube::DeleteOptions o;
        o.grace_period_seconds = a.grace_period_seconds;
        if (!a.precondition_uid.empty()) o.precondition_uid = a.precondition_uid;
        auto r = c->Delete(a.resource, ref.ns, a.name, o);
        // 409 with a UID precondition: the object of that name is another one by now; the
        // one meant is gone.
        const bool replaced = !r.ok() && !a.precondition_uid.empty() && kube::IsConflict(r.error());
        if (!r.ok() && !kube::IsNotFound(r.error()) && !replaced) {
          expectations_.Forget(key, a.resource, object_key);
          return r.error().ToStatus().WithContext("deleting " + a.resource.plural + " " + ref.ns +
                                                  "/" + a.name);
        }
        break;
      }
      case Action::Kind::kDeleteJob: {
        kube::DeleteOptions o;
        o.propagation_policy = "Background";
        o.precondition_uid = ref.uid;
        auto r = c->Delete(api::kTrainingJobs, ref.ns, ref.name, o);
        if (!r.ok() && !kube::IsNotFound(r.error())) {
          return r.error().ToStatus().WithContext("deleting finished TrainingJob " + ref.ns + "/" +
                                                  ref.name + " after its TTL");
        }
        if (deps_.log)
          deps_.log->Emit({{"event", "ttl_deleted"}, {"job", ref.ns + "/" + ref.name}});
        break;
      }
      case Action::Kind::kPatch:
      case Action::Kind::kUpdateStatus:
        TJ_RETURN_IF_ERROR(Send(key, job, a));
        break;
      case Action::Kind::kEvent: {
        if (deps_.log) {
          deps_.log->Emit({{"event", "job_event"},
                           {"job", ref.ns + "/" + ref.name},
                           {"type", a.event_type},
                           {"reason", a.reason},
                           {"message", a.message}});
        }
        // Written in the background: a reconcile does not wait for its Events.
        if (deps_.recorder) deps_.recorder->RecordAsync(job, a.event_type, a.reason, a.message);
        break;
      }
    }
  }
  return Status::Ok();
}

Status Executor::WriteStatus(const std::string& key, const json& job, const json& status) {
  const api::ObjectRef ref = api::RefOf(job);
  json obj = StatusWriteOf(job);
  for (int attempt = 0; attempt < 5; ++attempt) {
    obj["status"] = status;
    auto r = deps_.client->UpdateStatus(api::kTrainingJobs, ref.ns, obj);
    if (r.ok()) {
      // The next pass reads the job from the cache: not before it holds this write. A write
      // that changed nothing keeps the version (the API server skips it): nothing to wait for.
      const std::string before = obj["metadata"].value("resourceVersion", "");
      const std::string after = r->is_object() && r->contains("metadata")
                                    ? (*r)["metadata"].value("resourceVersion", "")
                                    : "";
      if (after != before) expectations_.ExpectNewVersion(key, api::kTrainingJobs, key, before);
      return Status::Ok();
    }
    if (kube::IsNotFound(r.error())) return Status::Ok();  // deleted meanwhile
    if (!kube::IsConflict(r.error())) {
      return r.error().ToStatus().WithContext("writing the status of TrainingJob " + ref.ns + "/" +
                                              ref.name);
    }
    // 409: someone changed the object (spec or metadata). The operator alone writes the
    // status, so ours still holds: re-read for the new resourceVersion and write again.
    auto fresh = deps_.client->Get(api::kTrainingJobs, ref.ns, ref.name);
    if (!fresh.ok()) {
      if (kube::IsNotFound(fresh.error())) return Status::Ok();
      return fresh.error().ToStatus().WithContext("re-reading TrainingJob " + ref.ns + "/" +
                                                  ref.name + " after a conflict");
    }
    if (api::RefOf(*fresh).uid != ref.uid) return Status::Ok();  // a new job of the same name
    obj = StatusWriteOf(*fresh);
  }
  return Status::Error("writing the status of TrainingJob " + ref.ns + "/" + ref.name +
                       ": still conflicting after 5 attempts; will retry");
}

}  // namespace tj::controller
