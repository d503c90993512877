#include "operator/controller/reconciler.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "common/backoff.h"
#include "common/status_schema.h"
#include "common/utf8.h"
#include "kube/object_meta.h"
#include "operator/controller/cache_transforms.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/restart_cause.h"

namespace tj::controller {
namespace {

// How long a running gang may go without one /status answer from its chief before the Running
// condition says so (a program's first answer comes once it has loaded its data).
constexpr std::chrono::seconds kNoStatusGrace{60};
constexpr char kNoStatusSuffix[] =
    "; the chief has not answered GET /status on $TJ_STATUS_PORT, so status.progress stays "
    "empty (serving it is optional: docs/tfjob.md)";

using api::ReplicaType;
using api::TrainingJobStatus;
using nlohmann::json;
using std::chrono::milliseconds;
namespace cond = api::condition;

std::string NameOf(const json& obj) { return api::RefOf(obj).name; }

// The kubelet's message when a pod's securityContext says runAsNonRoot and the image's user is
// root (or not numeric): the container never starts, and waiting does not help. "" otherwise.
std::string RootImageMessage(const PodView& pod) {
  for (const WaitingContainer& w : pod.waiting) {
    if (w.reason == "CreateContainerConfigError" &&
        w.message.find("runAsNonRoot") != std::string::npos) {
      return Utf8Prefix(w.message, 512);
    }
  }
  return "";
}

milliseconds Until(kube::WallTime now, kube::WallTime t) {
  auto d = std::chrono::duration_cast<milliseconds>(t - now);
  return std::max(d, milliseconds(0)) + milliseconds(1);
}

// Everything one pass decides, built up by the rules below.
class Pass {
 public:
  Pass(const Observed& in, const ReconcilerOptions& o)
      : in_(in),
        o_(o),
        ref_(api::RefOf(in.job)),
        job_identity_(std::make_shared<const json>(
            json{{"metadata", {{"name", ref_.name}, {"namespace", ref_.ns}, {"uid", ref_.uid}}}})) {
    status_ = TrainingJobStatus::FromJson(in.job.value("status", json::object()));
    original_ = status_.ToJson();
    // The spec this pass reads (API conventions: status.observedGeneration).
    if (const json* m = in.job.contains("metadata") ? &in.job["metadata"] : nullptr;
        m != nullptr && m->is_object() && m->contains("generation") &&
        (*m)["generation"].is_number_integer()) {
      status_.observed_generation = (*m)["generation"].get<int64_t>();
    }
    for (const auto& p : in.pods) {
      if (!IsOwnedBy(p, in.job)) continue;  // a foreign pod wearing our label: not ours
      pods_.push_back(ViewOfPod(p));
    }
  }

  Decision Run();

 private:
  void Event(const std::string& type, const std::string& reason, const std::string& message) {
    Action a;
    a.kind = Action::Kind::kEvent;
    a.event_type = type;
    a.reason = reason;
    a.message = message;
    d_.actions.push_back(std::move(a));
  }
  void Create(const kube::Resource& r, json object) {
    Action a;
    a.kind = Action::Kind::kCreate;
    a.resource = r;
    a.name = NameOf(object);
    a.object = std::move(object);
    d_.actions.push_back(std::move(a));
  }
  // The action builds the pod when it is sent (Action::build): a pass of a job of many
  // replicas holds none of them.
  void CreatePod(ReplicaType type, int index, int generation) {
    auto build = [spec = std::shared_ptr<const api::TrainingJobSpec>(spec_holder_),
                  job = job_identity_, type, index, generation, hash = KeyHashForNewPods()] {
      return BuildPod(*job, *spec, type, index, generation, hash);
    };
    // The view from the pod built from the templates as the view reads them (no copy of a
    // large template per replica).
    const json pod =
        BuildPod(*job_identity_, ViewSpec(), type, index, generation, KeyHashForNewPods());
    created_pods_.push_back(ViewOfPod(pod));
    Action a;
    a.kind = Action::Kind::kCreate;
    a.resource = kube::resources::kPods;
    a.name = NameOf(pod);
    // The pod's identity for those who sort the actions before they are sent (the gang's
    // PodGroup): its name and the two labels that place it. ObjectOf() builds the pod.
    const json& labels = pod["metadata"]["labels"];
    a.object = {{"metadata",
                 {{"name", a.name},
                  {"labels",
                   {{api::kLabelReplicaType, labels.value(api::kLabelReplicaType, "")},
                    {api::kLabelRestartCount, labels.value(api::kLabelRestartCount, "")}}}}}};
    a.build = std::move(build);
    d_.actions.push_back(std::move(a));
  }
  void DeletePod(const PodView& pod) {
    if (pod.being_deleted) return;
    Action a;
    a.kind = Action::Kind::kDelete;
    a.resource = kube::resources::kPods;
    a.name = pod.name;
    d_.actions.push_back(std::move(a));
  }
  void RequeueAfter(milliseconds d) {
    if (!d_.requeue_after || d < *d_.requeue_after) d_.requeue_after = d;
  }
  void RequeueAt(kube::WallTime t) { RequeueAfter(Until(in_.now, t)); }

  void Fail(const std::string& reason, const std::string& message);
  // Charges a gang restart of `cause` (described by `why`) as spec.failurePolicy says: counts
  // it by cause and, when it counts, against backoffLimit. Returns how it was charged, for
  // the GangRestart message; nullopt after failing the job (the rule says FailJob, or the
  // budget is spent).
  std::optional<std::string> ChargeGangRestart(api::RestartCause cause, const std::string& why);
  void Succeed(const std::string& message);
  void Finished();  // cleanPodPolicy and TTL of a finished job
  void ReplicaStatuses();
  void Progress();
  void NoStatusNote(bool chief_answered);
  // The rendezvous Secret: created (with in_.new_rendezvous_key, its hash recorded in
  // status.rendezvousKeyHash) when the operator has made none yet (by the status, else by the
  // pods' hashes: HashThePodsAgreeOn), or when a pod reports it missing (SecretMissingPod).
  // Sets key_hash_.
  void EnsureSecret();
  // A pod of the job the kubelet cannot start because the rendezvous Secret is not found: its
  // name, else "".
  std::string SecretMissingPod() const;
  // The key hash that every pod of the job with one carries; "" when none has one or they
  // differ.
  std::string HashThePodsAgreeOn() const;
  // The rendezvous key's hash that pods created in this pass read (the Secret's).
  std::string KeyHashForNewPods() const { return key_hash_; }
  // A chief or worker pod still running (or about to) with another key than the Secret's:
  // its name, else "". Pods without a hash (made by an older operator) are not judged, nor is
  // a gang of which a member has succeeded (it has trained).
  // The chief and worker pods of one gang, by replica (pointing into pods_).
  using GangPods = std::map<std::pair<ReplicaType, int>, const PodView*>;
  std::string PodWithAnotherKey(const GangPods& current) const;
  // Starts gang restart restart_count + 1: deletes the `current` gang, says why (`msg`).
  void RestartGang(const std::string& msg, const GangPods& current);
  // The pass's steps, in the order Run takes them. A step that returns true ends the pass.
  struct Gang {
    int generation = 0;                 // status.restartCount
    GangPods current;                   // chief and workers of this gang
    std::vector<const PodView*> stale;  // earlier gangs, removed replicas
    const PodView* evaluator = nullptr;
  };
  struct Failure {
    std::string pod;
    PodOutcome outcome;
    bool retryable;
    api::RestartPolicy policy;
  };
  // How the chief and worker pods of the gang stand.
  struct GangCensus {
    std::vector<Failure> failures;
    std::vector<std::pair<ReplicaType, int>> missing;  // never created in this gang
    int running = 0, expected = 0, succeeded_workers = 0;
    bool chief_succeeded = false;
    std::optional<kube::WallTime> chief_finished;
    std::optional<kube::WallTime> earliest_pending;
    std::string root_image;  // "<pod>: <the kubelet's message>" of a pod whose image runs as root
    std::string pending_pod, pending_reason;
  };
  bool ReadSpec();  // false: invalid, the job failed (InvalidSpec) and its pods go
  bool Suspended();
  bool ActiveDeadlinePassed();
  Gang SortPods();  // and deletes the stale ones
  bool RestartedForANewKey(const Gang& gang);
  GangCensus TakeCensus(const Gang& gang) const;
  bool SucceededOrWaitingForEvaluator(const Gang& gang, const GangCensus& census);
  bool FailedOrRestarted(const Gang& gang, const GangCensus& census);
  void CreateMissing(const Gang& gang, const GangCensus& census);
  void SuperviseEvaluator(const Gang& gang);
  bool RunningOrStartupFailed(const GangCensus& census);
  // restart_backoff_base doubled `doublings` times, at most restart_backoff_max.
  milliseconds RestartBackoff(int doublings) const;

  // Every condition holds as of the spec this pass read: stamp them all with its generation.
  void StampObservedGeneration() {
    for (auto& c : status_.conditions) c.observed_generation = status_.observed_generation;
  }
  Decision Done();   // replicaStatuses, then Final()
  Decision Final();  // the status (if it changed) and the actions

  const Observed& in_;
  const ReconcilerOptions& o_;
  api::ObjectRef ref_;
  // The spec, parsed once per pass and shared (not copied) with the pod actions' builders.
  std::shared_ptr<api::TrainingJobSpec> spec_holder_ = std::make_shared<api::TrainingJobSpec>();
  api::TrainingJobSpec& spec_ = *spec_holder_;
  // What BuildPod reads of the job (OwnerReference, RefOf): not its templates.
  std::shared_ptr<const json> job_identity_;
  // spec_ with each template reduced to what a pod's view reads (TemplateForView); made by
  // ViewSpec() when the pass first creates a pod.
  std::unique_ptr<api::TrainingJobSpec> view_spec_;
  const api::TrainingJobSpec& ViewSpec() {
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
  TrainingJobStatus status_;
  json original_;
  std::vector<PodView> pods_;          // the job's own pods
  std::vector<PodView> created_pods_;  // by this pass: Pending, so active in replicaStatuses
  std::string key_hash_;               // of the rendezvous Secret's key, set by EnsureSecret
  Decision d_;
};

void Pass::Fail(const std::string& reason, const std::string& message) {
  status_.SetCondition(cond::kFailed, true, reason, message, in_.now);
  status_.SetCondition(cond::kRunning, false, reason, message, in_.now);
  status_.SetCondition(cond::kRestarting, false, reason, message, in_.now);
  if (!status_.completion_time) status_.completion_time = kube::FormatTime(in_.now);
  Event("Warning", reason, message);
  d_.job_failed = true;
}

std::optional<std::string> Pass::ChargeGangRestart(api::RestartCause cause,
                                                   const std::string& why) {
  std::string rule;
  const api::FailureAction action = spec_.failure_policy.ActionFor(cause, &rule);
  const std::string name = api::ToString(cause);
  const int limit = spec_.run_policy.backoff_limit;
  int32_t& used = status_.restarts.backoff_limit_used;
  if (action == api::FailureAction::kFailJob) {
    Fail("FailurePolicy", why + "; cause " + name + ": " + rule + " fails the job");
    return std::nullopt;
  }
  const bool counts = action == api::FailureAction::kRestartJob;
  if (counts && used >= limit) {
    Fail("BackoffLimitExceeded", why + "; the gang was restarted " +
                                     std::to_string(status_.restart_count) + " times, " +
                                     std::to_string(used) + " of them counted (backoffLimit " +
                                     std::to_string(limit) + ")");
    return std::nullopt;
  }
  status_.restarts.by_cause[name] += 1;
  if (!counts) return name + ", not counted against backoffLimit " + std::to_string(limit);
  used += 1;
  return name + ", " + std::to_string(used) + " of backoffLimit " + std::to_string(limit);
}

void Pass::Succeed(const std::string& message) {
  status_.SetCondition(cond::kSucceeded, true, "JobSucceeded", message, in_.now);
  status_.SetCondition(cond::kRunning, false, "JobSucceeded", message, in_.now);
  status_.SetCondition(cond::kRestarting, false, "JobSucceeded", message, in_.now);
  if (!status_.completion_time) status_.completion_time = kube::FormatTime(in_.now);
  Event("Normal", "JobSucceeded", message);
  d_.job_succeeded = true;
}

void Pass::Finished() {
  const api::CleanPodPolicy policy = spec_.run_policy.clean_pod_policy;
  for (const auto& p : pods_) {
    if (policy == api::CleanPodPolicy::kAll ||
        (policy == api::CleanPodPolicy::kRunning && p.Active())) {
      DeletePod(p);
    }
  }
  if (spec_.run_policy.ttl_seconds_after_finished && status_.completion_time) {
    auto done = kube::ParseTime(*status_.completion_time);
    if (done) {
      const auto expires =
          *done + std::chrono::seconds(*spec_.run_policy.ttl_seconds_after_finished);
      if (in_.now >= expires) {
        Action a;
        a.kind = Action::Kind::kDeleteJob;
        a.resource = api::kTrainingJobs;
        a.name = ref_.name;
        d_.actions.push_back(std::move(a));
      } else {
        RequeueAt(expires);
      }
    }
  }
}

void Pass::ReplicaStatuses() {
  std::map<std::string, api::ReplicaStatus> out;
  for (const auto& [t, rs] : spec_.replica_specs) out[api::ToString(t)] = {};
  std::vector<const PodView*> pods;
  for (const auto& p : pods_) pods.push_back(&p);
  for (const auto& p : created_pods_) pods.push_back(&p);
  for (const PodView* pod : pods) {
    const PodView& p = *pod;
    const std::optional<ReplicaType> t = p.replica_type;
    if (!t || !out.contains(api::ToString(*t))) continue;
    if (*t != ReplicaType::kEvaluator && p.gang != status_.restart_count) {
      continue;  // a pod of an earlier gang
    }
    api::ReplicaStatus& s = out[api::ToString(*t)];
    if (p.phase == "Succeeded") {
      ++s.succeeded;
    } else if (p.phase == "Failed") {
      ++s.failed;
    } else if (p.Active()) {
      ++s.active;
    }
  }
  status_.replica_statuses = out;
}

void Pass::Progress() {
  const ReplicaType chief_type =
      spec_.Replicas(ReplicaType::kChief) > 0 ? ReplicaType::kChief : ReplicaType::kWorker;
  auto it = in_.trainer_status.find(PodName(ref_.name, chief_type, 0));
  if (it != in_.trainer_status.end() && it->second.is_object()) {
    const json& s = it->second;
    json p = json::object();
    namespace k = status_schema;
    CopyStatusField(s, k::kEpoch, p, "epoch");
    CopyStatusField(s, k::kTotalEpochs, p, "totalEpochs");
    CopyStatusField(s, k::kStep, p, "step");
    CopyStatusField(s, k::kLoss, p, "loss");
    CopyStatusField(s, k::kAccuracy, p, "accuracy");
    CopyStatusField(s, k::kImagesPerSec, p, "imagesPerSecond");
    if (s.contains(k::kLastBackup.key)) {  // {epoch, step} of the newest backup
      json b = json::object();
      CopyStatusField(s[k::kLastBackup.key], k::kEpoch, b, "epoch");
      CopyStatusField(s[k::kLastBackup.key], k::kStep, b, "step");
      if (!b.empty()) {
        // When the operator first saw it (within one progress poll of its write): what a
        // scheduler weighs to preempt the job that loses least (docs/kueue.md).
        const json was = status_.progress.is_object()
                             ? status_.progress.value("lastBackup", json::object())
                             : json::object();
        const bool same = was.is_object() &&
                          was.value("epoch", json()) == b.value("epoch", json()) &&
                          was.value("step", json()) == b.value("step", json()) &&
                          was.contains("time") && was["time"].is_string();
        b["time"] = same ? was["time"] : json(kube::FormatTime(in_.now));
        p["lastBackup"] = b;
      }
    }
    if (!p.empty()) status_.progress = p;
  }
  NoStatusNote(it != in_.trainer_status.end());
  auto take_eval = [&](const json& e) {
    if (!e.is_object()) return;
    json v = json::object();
    namespace k = status_schema;
    CopyStatusField(e, k::kCheckpoint, v, "checkpoint");
    if (!v.contains("checkpoint")) return;
    CopyStatusField(e, k::kEpoch, v, "epoch");
    CopyStatusField(e, k::kLoss, v, "loss");
    CopyStatusField(e, k::kAccuracy, v, "accuracy");
    status_.evaluation = v;
  };
  const std::string eval_pod = PodName(ref_.name, ReplicaType::kEvaluator, 0);
  if (auto e = in_.trainer_status.find(eval_pod); e != in_.trainer_status.end()) {
    if (e->second.is_object() && e->second.contains(status_schema::kEvaluation.key))
      take_eval(e->second[status_schema::kEvaluation.key]);
  }
  if (auto e = in_.final_evaluation.find(eval_pod); e != in_.final_evaluation.end()) {
    take_eval(e->second);
  }
}

// A program need not serve /status (docs/tfjob.md), but an empty status.progress should say
// why. Once the gang has run for kNoStatusGrace without a single answer from the chief, the
// Running condition's message says so; it is written once (the message then stays as it is)
// and goes away with the first answer. A job that has reported progress once is never told.
void Pass::NoStatusNote(bool chief_answered) {
  const api::Condition* running = status_.Find(cond::kRunning);
  if (running == nullptr || running->status != "True" || running->reason != "JobRunning") return;
  const std::string base = running->message.substr(0, running->message.find(kNoStatusSuffix));
  std::string message = base;
  if (!chief_answered && status_.progress.is_null()) {
    const auto since = kube::ParseTime(running->last_transition_time);
    if (!since) return;
    if (in_.now < *since + kNoStatusGrace) {
      RequeueAt(*since + kNoStatusGrace);
      return;
    }
    message = base + kNoStatusSuffix;
  }
  if (message != running->message) {
    status_.SetCondition(cond::kRunning, true, "JobRunning", message, in_.now);
  }
}

Decision Pass::Done() {
  ReplicaStatuses();
  return Final();
}

Decision Pass::Final() {
  StampObservedGeneration();
  json now = status_.ToJson();
  if (now != original_) d_.status = now;
  return std::move(d_);
}

std::string Pass::HashThePodsAgreeOn() const {
  std::string agreed;
  for (const auto& p : pods_) {
    const std::string& h = p.key_hash;
    if (h.empty()) continue;
    if (!agreed.empty() && h != agreed) return "";
    agreed = h;
  }
  return agreed;
}

void Pass::EnsureSecret() {
  // A pass that made the Secret and its pods but whose status was never written (an operator
  // that stopped in between): the pods say which key it made.
  if (status_.rendezvous_key_hash.empty()) status_.rendezvous_key_hash = HashThePodsAgreeOn();
  const bool made = !status_.rendezvous_key_hash.empty();
  const std::string missing_in = made ? SecretMissingPod() : "";
  // Written only when this pass's actions were applied: the Secret is this job's (a create
  // that found another's keeps the status as it was, and the executor sets the condition).
  status_.SetCondition(cond::kRendezvousSecretConflict, false, "SecretCreated",
                       "Secret " + SecretName(ref_.name) + " is this job's", in_.now);
  if (made && missing_in.empty()) {
    key_hash_ = status_.rendezvous_key_hash;
    return;
  }
  if (in_.new_rendezvous_key.empty()) return;
  Create(kube::resources::kSecrets, BuildSecret(in_.job, in_.new_rendezvous_key));
  key_hash_ = KeyHash(in_.new_rendezvous_key);
  status_.rendezvous_key_hash = key_hash_;
  if (!missing_in.empty()) {
    Event("Warning", "RendezvousSecretMissing",
          "Secret " + SecretName(ref_.name) + " was deleted (" + missing_in +
              " cannot start without it); creating it again with a new key");
  }
}

std::string Pass::SecretMissingPod() const {
  // The kubelet's words for a Secret that is not there (`secret "x" not found`; the API
  // server's `secrets "x" not found`), naming exactly ours: a ConfigMap of that name, or a
  // message that merely quotes it, is not our Secret missing. Even when one is taken for it,
  // the Secret is only created, never replaced: if it exists, the create fails and no key
  // changes, so no gang restarts for it (Executor::CreateSecret).
  const std::string quoted = "\"" + SecretName(ref_.name) + "\" not found";
  for (const auto& p : pods_) {
    if (!p.Active()) continue;
    for (const WaitingContainer& w : p.waiting) {
      if (w.reason != "CreateContainerConfigError") continue;
      if (w.message.find("secret " + quoted) != std::string::npos ||
          w.message.find("secrets " + quoted) != std::string::npos) {
        return p.name;
      }
    }
  }
  return "";
}

std::string Pass::PodWithAnotherKey(const GangPods& current) const {
  const std::string& key = key_hash_;
  if (key.empty()) return "";
  // A gang of which a member has finished has trained: it is not started again for a key.
  for (const auto& [k, p] : current) {
    if (p->phase == "Succeeded") return "";
  }
  for (const auto& [k, p] : current) {
    const std::string& held = p->key_hash;
    if (held.empty() || held == key || !p->Active()) continue;
    return p->name;
  }
  return "";
}

void Pass::RestartGang(const std::string& msg, const GangPods& current) {
  status_.restart_count += 1;
  status_.created_generation = -1;
  status_.SetCondition(cond::kRestarting, true, "GangRestart", msg, in_.now);
  status_.SetCondition(cond::kRunning, false, "GangRestart", msg, in_.now);
  Event("Warning", "GangRestart", msg);
  d_.job_restarted = true;
  for (const auto& [k, p] : current) DeletePod(*p);
  RequeueAfter(std::chrono::seconds(1));
  Progress();
}

Decision Pass::Run() {
  if (kube::IsBeingDeleted(in_.job))
    return std::move(d_);  // the garbage collector removes what it owns
  if (!ReadSpec()) return Final();
  if (status_.Finished()) {
    Finished();
    // replicaStatuses stay as they were when the job finished: cleanup deleting pods does
    // not rewrite how the replicas ended.
    return Final();
  }
  if (status_.Find(cond::kCreated) == nullptr) {
    status_.SetCondition(cond::kCreated, true, "JobCreated",
                         "TrainingJob " + ref_.name + " is created", in_.now);
    d_.job_created = true;
  }
  if (Suspended()) return Done();
  if (!status_.start_time) status_.start_time = kube::FormatTime(in_.now);
  if (!in_.service) Create(kube::resources::kServices, BuildService(in_.job, spec_));
  EnsureSecret();
  if (ActiveDeadlinePassed()) return Done();

  const Gang gang = SortPods();
  if (RestartedForANewKey(gang)) return Done();
  const GangCensus census = TakeCensus(gang);
  // The whole gang of this generation exists: it was created, whatever the status says (the
  // status of the pass that created it may never have been written: an operator that stopped
  // with it kept back, executor.h). A pod missing from now on is a failure, not a create.
  if (census.missing.empty()) {
    status_.created_generation = gang.generation;
    status_.SetCondition(cond::kPodCreateRefused, false, "PodsCreated",
                         "the API server accepted the job's pods", in_.now);
  }
  if (SucceededOrWaitingForEvaluator(gang, census)) return Done();
  if (FailedOrRestarted(gang, census)) return Done();
  CreateMissing(gang, census);
  SuperviseEvaluator(gang);
  if (RunningOrStartupFailed(census)) return Done();

  Progress();
  // Poll while a trainer runs (status.progress); pending pods are watched, not polled.
  if (std::any_of(pods_.begin(), pods_.end(),
                  [](const PodView& p) { return p.phase == "Running"; })) {
    RequeueAfter(o_.progress_poll);
  }
  return Done();
}

bool Pass::ReadSpec() {
  static const json kNoSpec;
  auto it = in_.job.is_object() ? in_.job.find("spec") : in_.job.end();
  auto spec = api::ParseSpec(it != in_.job.end() ? *it : kNoSpec);
  if (spec.ok()) {
    if (Status named = api::ValidateJobName(ref_.name, *spec); !named.ok()) spec = named;
  }
  if (spec.ok()) {
    spec_ = std::move(*spec);
    return true;
  }
  if (!status_.IsTrue(cond::kFailed)) {
    Fail("InvalidSpec", "TrainingJob " + ref_.ns + "/" + ref_.name + " is invalid: " +
                            spec.status().message() + "; fix the spec and re-create the job");
  }
  for (const auto& p : pods_) DeletePod(p);
  return false;
}

bool Pass::Suspended() {
  // Suspend: no pods; resume starts afresh (new start time, a fresh gang).
  if (spec_.run_policy.suspend) {
    for (const auto& p : pods_) DeletePod(p);
    if (!status_.IsTrue(cond::kSuspended)) {
      status_.SetCondition(cond::kSuspended, true, "JobSuspended", "the job is suspended", in_.now);
      status_.SetCondition(cond::kRunning, false, "JobSuspended", "the job is suspended", in_.now);
      status_.SetCondition(cond::kRestarting, false, "JobSuspended", "the job is suspended",
                           in_.now);
      Event("Normal", "JobSuspended", "suspended: deleting its pods");
    }
    status_.created_generation = -1;
    status_.start_time.reset();
    status_.progress = nullptr;
    return true;
  }
  if (status_.IsTrue(cond::kSuspended)) {
    status_.SetCondition(cond::kSuspended, false, "JobResumed", "the job is resumed", in_.now);
    Event("Normal", "JobResumed", "resumed: creating its pods");
  }
  return false;
}

bool Pass::ActiveDeadlinePassed() {
  // activeDeadlineSeconds, from the start time, enforced by a requeue at the deadline.
  if (!spec_.run_policy.active_deadline_seconds) return false;
  auto start = kube::ParseTime(*status_.start_time);
  if (!start) return false;
  const auto deadline = *start + std::chrono::seconds(*spec_.run_policy.active_deadline_seconds);
  if (in_.now < deadline) {
    RequeueAt(deadline);
    return false;
  }
  Fail("DeadlineExceeded", "the job ran longer than activeDeadlineSeconds=" +
                               std::to_string(*spec_.run_policy.active_deadline_seconds));
  Finished();
  return true;
}

Pass::Gang Pass::SortPods() {
  // The current gang, the stale ones (earlier restarts, removed replicas), the evaluator.
  Gang g;
  g.generation = status_.restart_count;
  for (const PodView& p : pods_) {
    const std::optional<ReplicaType> t = p.replica_type;
    const int index = p.replica_index;
    const bool in_spec = t && index >= 0 && index < spec_.Replicas(*t);
    if (in_spec && *t == ReplicaType::kEvaluator && g.evaluator == nullptr) {
      g.evaluator = &p;
    } else if (!in_spec || *t == ReplicaType::kEvaluator || p.gang != g.generation) {
      g.stale.push_back(&p);  // outside the spec, a second evaluator, or of an earlier gang
    } else {
      g.current[{*t, index}] = &p;
    }
  }
  for (const PodView* p : g.stale) DeletePod(*p);
  return g;
}

bool Pass::RestartedForANewKey(const Gang& gang) {
  // A new rendezvous key (the Secret was deleted and made again): pods that hold the old one
  // cannot rendezvous with those that read the new one, so the whole gang starts again. Not
  // the job's failure: by default backoffLimit does not stop it.
  const std::string pod = PodWithAnotherKey(gang.current);
  if (pod.empty()) return false;
  const std::string why = "the rendezvous key in Secret " + SecretName(ref_.name) + " changed (" +
                          pod + " was started with another)";
  auto budget = ChargeGangRestart(api::RestartCause::kOperatorRestart, why);
  if (!budget) return true;  // a failure policy rule fails the job on it
  RestartGang("restart " + std::to_string(status_.restart_count + 1) + " (" + *budget +
                  "): " + why + "; restarting all chief and worker pods",
              gang.current);
  return true;
}

Pass::GangCensus Pass::TakeCensus(const Gang& gang) const {
  // Chief and worker pods: how each stands.
  GangCensus c;
  const ReplicaType chief_type =
      spec_.Replicas(ReplicaType::kChief) > 0 ? ReplicaType::kChief : ReplicaType::kWorker;
  for (ReplicaType t : {ReplicaType::kChief, ReplicaType::kWorker}) {
    if (!spec_.replica_specs.contains(t)) continue;
    const api::ReplicaSpec& rs = spec_.replica_specs.at(t);
    for (int i = 0; i < rs.replicas; ++i) {
      ++c.expected;
      const std::string name = PodName(ref_.name, t, i);
      auto it = gang.current.find({t, i});
      if (it == gang.current.end()) {
        if (status_.created_generation == gang.generation) {
          PodOutcome o;
          o.failed = o.deleted = true;
          o.cause = api::RestartCause::kDeleted;
          c.failures.push_back({name, o, true, rs.restart_policy});
        } else {
          c.missing.emplace_back(t, i);
        }
        continue;
      }
      const PodView& pod = *it->second;
      const std::string& phase = pod.phase;
      if (pod.being_deleted || phase == "Failed") {
        PodOutcome o = OutcomeOf(pod);
        c.failures.push_back({name, o, IsRetryable(rs.restart_policy, o), rs.restart_policy});
      } else if (phase == "Succeeded") {
        ++c.running;
        if (t == ReplicaType::kWorker) ++c.succeeded_workers;
        if (t == chief_type && i == 0) {
          c.chief_succeeded = true;
          if (pod.trainer_terminated) c.chief_finished = pod.trainer_terminated->finished_at;
        }
      } else if (phase == "Running") {
        ++c.running;
      } else {
        if (c.root_image.empty()) {
          if (std::string m = RootImageMessage(pod); !m.empty()) c.root_image = name + ": " + m;
        }
        const std::optional<kube::WallTime>& created = pod.created;
        if (created && (!c.earliest_pending || *created < *c.earliest_pending)) {
          c.earliest_pending = created;
          c.pending_pod = name;
          c.pending_reason = pod.PendingReason();
        }
      }
    }
  }
  return c;
}

bool Pass::SucceededOrWaitingForEvaluator(const Gang& gang, const GangCensus& c) {
  // Success: the chief (else worker 0) exited 0, or every worker under AllWorkers.
  const bool success = spec_.success_policy == api::SuccessPolicy::kChief
                           ? c.chief_succeeded
                           : (c.chief_succeeded || spec_.Replicas(ReplicaType::kChief) == 0) &&
                                 c.succeeded_workers == spec_.Replicas(ReplicaType::kWorker);
  if (!success) return false;
  // Wait (bounded) for the evaluator's final evaluation, so cleanup never kills it.
  if (gang.evaluator != nullptr && gang.evaluator->Active()) {
    const kube::WallTime since = c.chief_finished.value_or(in_.now);
    const auto until = since + o_.evaluator_grace;
    if (in_.now < until) {
      status_.SetCondition(cond::kRunning, true, "WaitingForEvaluator",
                           "training finished; waiting for the evaluator's final evaluation",
                           in_.now);
      Progress();
      RequeueAt(until);
      RequeueAfter(o_.progress_poll);
      return true;
    }
    Progress();
    Succeed("training finished; the evaluator did not finish within " +
            std::to_string(o_.evaluator_grace.count() / 1000) + "s");
  } else {
    Progress();
    Succeed("TrainingJob " + ref_.name + " succeeded" +
            (status_.evaluation.is_object() && status_.evaluation.contains("accuracy")
                 ? ": test accuracy " + status_.evaluation["accuracy"].dump()
                 : ""));
  }
  Finished();
  return true;
}

bool Pass::FailedOrRestarted(const Gang& gang, const GangCensus& c) {
  // A failure that the pod's restart policy does not retry fails the job at once; peers that
  // only lost a disrupted pod (exit 75 after it was evicted or deleted) share its cause.
  const bool disrupted = std::any_of(c.failures.begin(), c.failures.end(), [](const Failure& f) {
    return f.outcome.cause != api::RestartCause::kFailed;
  });
  for (const auto& f : c.failures) {
    if (f.retryable || (disrupted && f.outcome.exit_code == 75)) continue;
    Fail(f.policy == api::RestartPolicy::kNever ? "PodFailed" : "NonRetryableExitCode",
         Describe(f.pod, f.outcome) + ", which restartPolicy " + api::ToString(f.policy) +
             " does not retry");
    Finished();
    return true;
  }
  if (c.failures.empty()) return false;
  // The gang restarts: prefer the root cause over peers that only lost it (exit 75).
  const Failure* cause = &c.failures.front();
  for (const auto& f : c.failures) {
    if (RootCauseRank(f.outcome.cause, f.outcome.exit_code == 75) <
        RootCauseRank(cause->outcome.cause, cause->outcome.exit_code == 75)) {
      cause = &f;
    }
  }
  const std::string why = Describe(cause->pod, cause->outcome);
  auto budget = ChargeGangRestart(cause->outcome.cause, why);
  if (!budget) {
    Finished();
    return true;
  }
  RestartGang("restart " + std::to_string(status_.restart_count + 1) + " (" + *budget +
                  "): " + why + "; restarting all chief and worker pods",
              gang.current);
  return true;
}

void Pass::CreateMissing(const Gang& gang, const GangCensus& c) {
  // Create what is missing: after the previous gang is gone and the restart backoff passed.
  if (c.missing.empty()) return;
  const int gen = gang.generation;
  const bool old_gang_left =
      std::any_of(gang.stale.begin(), gang.stale.end(),
                  [](const PodView* p) { return p->replica_type != ReplicaType::kEvaluator; });
  std::optional<kube::WallTime> ready_at;
  const api::Condition* restarting = status_.Find(cond::kRestarting);
  if (gen > 0 && restarting != nullptr && restarting->status == "True") {
    // lastUpdateTime: restarts in a row keep the condition True but change its message.
    auto since =
        kube::ParseTime(restarting->last_update_time.empty() ? restarting->last_transition_time
                                                             : restarting->last_update_time);
    if (since) ready_at = *since + RestartBackoff(gen - 1);
  }
  if (old_gang_left) {
    RequeueAfter(std::chrono::seconds(1));  // deletions also trigger a pass
  } else if (ready_at && in_.now < *ready_at) {
    RequeueAt(*ready_at);
  } else {
    std::string names;
    for (const auto& [t, i] : c.missing) {
      CreatePod(t, i, gen);
      names += (names.empty() ? "" : ", ") + PodName(ref_.name, t, i);
    }
    status_.created_generation = gen;
    // Written only when every create of this pass was accepted.
    status_.SetCondition(cond::kPodCreateRefused, false, "PodsCreated",
                         "the API server accepted the job's pods", in_.now);
    Event("Normal", "CreatedPods",
          "created " + names + (gen > 0 ? " (restart " + std::to_string(gen) + ")" : ""));
  }
}

milliseconds Pass::RestartBackoff(int doublings) const {
  return std::chrono::duration_cast<milliseconds>(ExponentialDelay(
      o_.restart_backoff_base, o_.restart_backoff_max, 2.0, std::max(doublings, 0)));
}

void Pass::SuperviseEvaluator(const Gang& gang) {
  // The evaluator runs on its own: created when missing, restarted alone when its policy says.
  if (spec_.Replicas(ReplicaType::kEvaluator) == 0) return;
  const std::string name = PodName(ref_.name, ReplicaType::kEvaluator, 0);
  const api::ReplicaSpec& rs = spec_.replica_specs.at(ReplicaType::kEvaluator);
  if (gang.evaluator == nullptr) {
    CreatePod(ReplicaType::kEvaluator, 0, gang.generation);
    return;
  }
  const PodView& evaluator = *gang.evaluator;
  if (evaluator.being_deleted || evaluator.phase != "Failed") return;
  PodOutcome o = OutcomeOf(evaluator);
  const int limit = spec_.run_policy.backoff_limit;
  // Its own share of backoffLimit, used as the failure policy says (an eviction: not).
  int32_t& used = status_.restarts.evaluator_backoff_limit_used;
  const bool counts = spec_.failure_policy.ActionFor(o.cause) !=
                      api::FailureAction::kRestartJobAndIgnoreBackoffLimit;
  if (IsRetryable(rs.restart_policy, o) && (!counts || used < limit)) {
    // Its own backoff (base * 2^restarts from when it ended), its own share of backoffLimit.
    const milliseconds backoff = RestartBackoff(status_.evaluator_restarts);
    std::optional<kube::WallTime> ended;
    if (evaluator.trainer_terminated) ended = evaluator.trainer_terminated->finished_at;
    const kube::WallTime ready_at = ended.value_or(in_.now) + backoff;
    if (in_.now < ready_at) {
      RequeueAt(ready_at);
      return;
    }
    status_.evaluator_restarts += 1;
    if (counts) used += 1;
    Event("Warning", "EvaluatorRestart",
          Describe(name, o) + "; restarting the evaluator (" +
              (counts ? std::to_string(used) + " of " + std::to_string(limit)
                      : api::ToString(o.cause) + ", not counted against backoffLimit") +
              ")");
    DeletePod(evaluator);
  } else if (IsRetryable(rs.restart_policy, o) && used == limit) {
    used += 1;  // said once
    Event("Warning", "EvaluatorGaveUp",
          Describe(name, o) + "; not restarted: backoffLimit " + std::to_string(limit) +
              " reached. Training goes on without evaluations");
  }
}

bool Pass::RunningOrStartupFailed(const GangCensus& c) {
  // Running once every chief/worker pod runs; the startup deadline until then.
  if (c.running == c.expected && c.missing.empty()) {
    if (!status_.IsTrue(cond::kRunning)) {
      const std::string msg =
          "all " + std::to_string(c.expected) + " chief/worker pods are running";
      status_.SetCondition(cond::kRunning, true, "JobRunning", msg, in_.now);
      status_.SetCondition(cond::kRestarting, false, "JobRunning", msg, in_.now);
      Event("Normal", "JobRunning", msg);
    }
    return false;
  }
  if (!c.root_image.empty()) {
    // The operator's secure default (runAsNonRoot) meets an image whose user is root: the pod
    // can never start, so the job fails at once with how to opt out.
    Fail("ImageRunsAsRoot",
         "pod " + c.root_image +
             "; the image runs as root, which the pod's default securityContext.runAsNonRoot: "
             "true forbids: set securityContext: {runAsNonRoot: false} in the replica's pod "
             "template to allow it, or give the image a non-root USER");
    Finished();
    return true;
  }
  if (!spec_.run_policy.startup_deadline_seconds || !c.earliest_pending) return false;
  const auto deadline =
      *c.earliest_pending + std::chrono::seconds(*spec_.run_policy.startup_deadline_seconds);
  if (in_.now < deadline) {
    RequeueAt(deadline);
    return false;
  }
  Fail("StartupDeadlineExceeded",
       "pod " + c.pending_pod + " was not running " +
           std::to_string(*spec_.run_policy.startup_deadline_seconds) + "s after it was created" +
           (c.pending_reason.empty() ? "" : " (" + c.pending_reason + ")"));
  Finished();
  return true;
}

}  // namespace

bool CopyStatusField(const json& from, status_schema::Field field, json& to, const char* to_key) {
  if (!from.is_object()) return false;
  const auto it = from.find(field.key);
  if (it == from.end()) return false;
  bool ok = false;
  switch (field.kind) {
    case status_schema::Kind::kCount:
      ok = (it->is_number_unsigned() && it->get<uint64_t>() <= INT32_MAX) ||
           (it->is_number_integer() && it->get<int64_t>() >= 0 && it->get<int64_t>() <= INT32_MAX);
      break;
    case status_schema::Kind::kNumber:
      ok = it->is_number();
      break;
    case status_schema::Kind::kText:
      ok = it->is_string() &&
           it->get_ref<const std::string&>().size() <= status_schema::kMaxTextBytes;
      break;
    case status_schema::Kind::kInfo:
    case status_schema::Kind::kObject:
      break;  // not copied as a value: an object's fields are copied one by one
  }
  if (ok) to[to_key] = *it;
  return ok;
}

PodOutcome OutcomeOf(const PodView& pod) {
  PodOutcome o;
  o.cause = ClassifyRestartCause(pod);
  o.failed = pod.phase == "Failed" || pod.being_deleted;
  // A disruption (DisruptionTarget, else the status reason of one): not the trainer's doing.
  o.deleted = pod.being_deleted || !pod.disruption.empty() || pod.reason == "Evicted" ||
              pod.reason == "Preempting" || pod.reason == "Shutdown";
  o.reason = pod.reason;
  if (pod.trainer_terminated) {
    o.exit_code = pod.trainer_terminated->exit_code;
    if (o.reason.empty()) o.reason = pod.trainer_terminated->reason;
  }
  return o;
}

bool IsRetryable(api::RestartPolicy policy, const PodOutcome& o) {
  if (o.deleted) return true;  // not the trainer's fault: restart under every policy
  switch (policy) {
    case api::RestartPolicy::kNever:
      return false;
    case api::RestartPolicy::kOnFailure:
    case api::RestartPolicy::kAlways:
      return true;
    case api::RestartPolicy::kExitCode:
      // Signals (128+n), the trainer's "peer lost" (75); no exit code: the node lost it.
      return !o.exit_code || *o.exit_code >= 128 || *o.exit_code == 75;
  }
  return false;
}

std::string Describe(const std::string& pod, const PodOutcome& o) {
  // How a pod that did not end on its own went: its cause's word (DisruptionTarget's reason).
  const std::string gone = o.cause == api::RestartCause::kEvicted     ? "evicted"
                           : o.cause == api::RestartCause::kPreempted ? "preempted"
                                                                      : "deleted";
  if (o.reason == "Evicted") return "pod " + pod + " was evicted";
  if (o.deleted && !o.exit_code) return "pod " + pod + " was " + gone;
  std::string s = "pod " + pod;
  if (o.exit_code) {
    s += " exited with code " + std::to_string(*o.exit_code);
    if (*o.exit_code > 128) s += " (signal " + std::to_string(*o.exit_code - 128) + ")";
    // The trainer exits 75 when it lost a peer, and after stopping on its pod's SIGTERM.
    if (*o.exit_code == 75) s += o.deleted ? " (stopped on SIGTERM)" : " (peer lost)";
  } else {
    s += " failed";
  }
  if (!o.reason.empty() && o.reason != "Error" && o.reason != "Completed") {
    s += " (" + o.reason + ")";
  }
  if (o.deleted) s += " and was " + gone;
  return s;
}

json ObjectOf(const Action& a) { return a.build ? a.build() : a.object; }

Decision Reconcile(const Observed& in, const ReconcilerOptions& options) {
  // Another controller's job (spec.managedBy): nothing of it is this operator's to create,
  // delete or write, not even its status (a malformed one included).
  if (!api::OtherManager(in.job).empty()) return Decision{};
  try {
    return Pass(in, options).Run();
  } catch (const std::exception& e) {
    // Nothing a user sends may crash the operator: a malformed object ends here.
    Decision d;
    TrainingJobStatus s = TrainingJobStatus::FromJson(
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
