// The executor: reads one TrainingJob and what it owns from the informer caches (with a queued
// job's Kueue objects and the gang's PodGroups), asks the pure reconciler what to do, and
// applies it through kube::Client: creates, deletes, patches and status writes of what the job
// owns, Events (in the background), and the job's status through the /status subresource
// (409 -> re-read the job and write again). Sync is read, reconcile, apply: nothing before the
// reconciler edits what it observed, nothing after it edits what it decided. What the API
// server refuses of an action (Action::refusable, a refused NetworkPolicy) is kept for the
// job's next pass (Observed::refused), which says it in the job's status. A pass never acts on a
// cache that lags behind its own writes: until the caches show the creates, deletes and status
// write of the previous pass (kube::Expectations), the key waits. Thread-safe as long as one key is
// synced by one thread at a time (the work queue guarantees it).
//
// Status writes give way to other work (ExecutorDeps::defer_status): while other keys are
// queued or being synced, a pass keeps the status it computed instead of writing it and asks
// for a pass once the operator is idle, at the latest kMaxStatusDelay after the first kept
// status. Passes in between start from the kept status, as if it had been written. Under a
// burst of new jobs the API server then takes the pods' creates first and the status writes
// after them (the load test, docs/reliability.md); a single job's writes are not delayed.
// Creates and deletes are never deferred.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/event_log.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "kube/client.h"
#include "kube/event_recorder.h"
#include "kube/expectations.h"
#include "kube/object_cache.h"
#include "operator/controller/departed_pods.h"
#include "operator/controller/gang_scheduling.h"
#include "operator/controller/kueue_admission.h"
#include "operator/controller/metrics.h"
#include "operator/controller/reconciler.h"
#include "operator/controller/reported_backups.h"
#include "operator/controller/slow_start.h"
#include "operator/controller/trainer_status_poller.h"

namespace tj::controller {

// Informer caches (kept filled by their informers) of the objects jobs own.
struct OwnedObjectCaches {
  const kube::ObjectCache* jobs = nullptr;  // TrainingJobs, whole (managedFields aside)
  const kube::ObjectCache* pods = nullptr;  // labelled tjo.dev/job-name
  const kube::ObjectCache* services = nullptr;
  // Labelled tjo.dev/job-name; null when jobs get no NetworkPolicy
  // (ReconcilerOptions::network_policy unset).
  const kube::ObjectCache* network_policies = nullptr;
  // No Secrets: the operator never reads them (Executor::CreateSecret).
};

// Kueue's objects as the operator watches them (informers on the Workloads labelled with a
// job's name, on ResourceFlavors and WorkloadPriorityClasses: job_informers.h), else, each
// null, read from the API server. Read from the caches, a pass of a queued job asks the API
// server nothing; the creates, patches and status writes stay live.
struct KueueCaches {
  const kube::ObjectCache* workloads = nullptr;
  const kube::ObjectCache* flavors = nullptr;
  const kube::ObjectCache* priority_classes = nullptr;
};

// The jobs' PodGroups of each kind (gang_scheduling.h) as the operator watches them
// (informers on those labelled with a job's name), indexed by gang::Kind; null where it does
// not (the API is not served, or the operator may not list it).
struct PodGroupCaches {
  std::array<const kube::ObjectCache*, std::size(gang::kKinds)> by_kind{};
  const kube::ObjectCache* Of(gang::Kind kind) const { return by_kind[static_cast<size_t>(kind)]; }
};

// How long a pass waits for the caches to show its own creates and deletes before it acts on
// what they show (client-go's expectations timeout).
inline constexpr std::chrono::minutes kExpectationsTtl{5};

// The longest a status write gives way to other work.
inline constexpr std::chrono::seconds kMaxStatusDelay{5};

// How a status write gives way (see above): `busy(key)` says whether other work than key's
// own is queued or in flight; `write_later(key, latest)` asks for a pass of key once the
// operator is idle, at the latest after `latest` (kube::WorkQueue's BusyBesides and
// AddWhenIdle).
struct StatusDeferral {
  std::function<bool(const std::string& key)> busy;
  std::function<void(const std::string& key, std::chrono::milliseconds latest)> write_later;
};
struct ExecutorDeps {
  kube::Client* client = nullptr;           // required
  kube::EventRecorder* recorder = nullptr;  // may be null: no Events
  OperatorMetrics* metrics = nullptr;       // may be null
  EventLog* log = nullptr;                  // may be null
  std::function<kube::WallTime()> wall_clock = [] { return std::chrono::system_clock::now(); };
  // GET http://<podIP>:<status port>/status of a running trainer pod; nullopt when it does
  // not answer (quickly: it runs inside a reconcile).
  std::function<std::optional<nlohmann::json>(const PodView& pod)> trainer_status;
  // Set: /status is read through it, off the pass (its last answer; a new one requeues the
  // job), and trainer_status is not called; null: trainer_status is asked within the pass.
  TrainerStatusPoller* status_poller = nullptr;
  // The tail of a pod's trainer log; nullopt when it cannot be read.
  // The log of one container of a pod (its TF_CONFIG container: a pod may have sidecars).
  std::function<std::optional<std::string>(const std::string& ns, const std::string& pod,
                                           const std::string& container)>
      pod_log;
  std::function<std::string()> random_key;  // a fresh rendezvous key
  // Required: the job, its pods and Service are read from these caches, with expectations.
  OwnedObjectCaches caches;
  Clock* clock = nullptr;  // for the expectations' TTL and kept statuses; null: the real clock
  std::optional<StatusDeferral> defer_status;  // unset: every status is written at once
  // The backups stopped chiefs reported, noted from the pod events (reported_backups.h); may
  // be null: only the cached pods' are read.
  ReportedBackups* reported_backups = nullptr;
  // The last views of the job's pods that are gone, noted from the pod events
  // (departed_pods.h); may be null: a gone pod reads as deleted.
  DepartedPods* departed_pods = nullptr;
  // Kueue's objects as the operator watches them; all null: read live.
  KueueCaches kueue;
  // The jobs' PodGroups as the operator watches them; a kind not watched is not read.
  PodGroupCaches pod_groups;
  // The cluster's Nodes as the operator watches them (TrimNodeForCache), indexed by
  // IndexNodesForInPlace; null when it does not (it may not list them): no pass then judges a
  // node (Observed::nodes), and no gang restarts in place (Observed::in_place_nodes).
  const kube::ObjectCache* nodes = nullptr;
};

// The index of the node cache by how a node stands for in-place restarts: kNodeDeclares for a
// node that takes new pods (TakesNewPods) and declares kRestartAllContainersFeature, kNodeLacks
// for one that takes them and does not, none for the others; so a pass counts them
// (CountInPlaceNodes) without reading every node.
inline constexpr char kNodeInPlaceIndex[] = "in-place";
inline constexpr char kNodeDeclares[] = "declares";
inline constexpr char kNodeLacks[] = "lacks";
// Adds that index to `nodes`, before the first node goes in (AddNodeInformer does).
void IndexNodesForInPlace(kube::ObjectCache& nodes);
// Observed::in_place_nodes of a cache so indexed.
InPlaceNodes CountInPlaceNodes(const kube::ObjectCache& nodes);

// What passes over large jobs may hold at once. A pass costs memory with its job's templates:
// it parses them, builds each pod from them, sends it and reads the answer, each a JSON tree
// of several times the template's text. A job whose templates (as the cache keeps them,
// CompactTemplateBytes) come to more than kLargeJobBytes takes its bytes, at most
// kLargePassBytes, from a budget of kLargePassBytes for its pass; when they are not free the
// pass does not start and the key is looked at again kLargePassRetry later, its worker free
// for other jobs. So passes over jobs near the API server's size limit (1.5 MiB) run one at a
// time, smaller large ones a few at once, and small jobs never wait. Large jobs that wait are
// served in turn: while one waits, no other large pass starts before it (a job whose pods
// are refused, retried at the queue's fast backoff, would take the budget over and over), and
// one that has not asked again for kLargePassForgetAfter (deleted, or no longer large) loses
// its turn.
inline constexpr size_t kLargeJobBytes = size_t{64} << 10;
inline constexpr size_t kLargePassBytes = size_t{3} << 19;  // 1.5 MiB
inline constexpr std::chrono::milliseconds kLargePassRetry{500};
inline constexpr std::chrono::seconds kLargePassForgetAfter{5};

// The budget above: thread-safe.
class LargePassBudget {
 public:
  // For the pass of `key` at `now`: takes min(bytes, kLargePassBytes) when free and no other
  // large job waits before it (true), else queues it (false); takes 0 for a job of at most
  // kLargeJobBytes, which never waits.
  bool TryTake(const std::string& key, size_t bytes, Clock::TimePoint now, size_t* taken);
  void Give(size_t taken);
  size_t in_use() const;

 private:
  struct Waiter {
    std::string key;
    Clock::TimePoint last_asked;
  };
  mutable Mutex mu_;
  size_t in_use_ TJ_GUARDED_BY(mu_) = 0;
  std::vector<Waiter> waiting_ TJ_GUARDED_BY(mu_);  // in the order they first asked
};

class Executor {
 public:
  Executor(ExecutorDeps deps, ReconcilerOptions options);

  // One pass for "namespace/name". Returns when to look again (nullopt: on the next event),
  // or an error (the caller requeues with backoff).
  StatusOr<std::optional<std::chrono::milliseconds>> Sync(const std::string& key);

  // Writes every status kept back by a busy operator (at shutdown, while still the leader).
  // Returns how many were written; failures are logged and the rest still written.
  int WriteKeptStatuses();

  // ReconcilerOptions::native_pod_groups, once the API server has been asked; before the
  // first Sync.
  void set_native_pod_groups(bool served) { options_.native_pod_groups = served; }
  // ReconcilerOptions::restart_in_place, once the API server's version is known; before the
  // first Sync.
  void set_restart_in_place(bool on) { options_.restart_in_place = on; }
  // Where gangs may restart in place (ReconcilerOptions::restart_in_place): what the nodes now
  // allow (ChooseInPlace), said in the log (event restart_in_place) when it is not what was
  // last said; every pass does the same with what it read. Nothing otherwise.
  void SayInPlaceChoice();
  void set_kueue_caches(const KueueCaches& caches) { deps_.kueue = caches; }
  void set_pod_group_caches(const PodGroupCaches& caches) { deps_.pod_groups = caches; }
  void set_node_cache(const kube::ObjectCache* nodes) { deps_.nodes = nodes; }

 private:
  // Fills in->trainer_status and in->final_evaluation from the pods in in->pods: the /status of
  // the running chief (Chief 0, else worker 0) and evaluator, asked in parallel; the final
  // progress and evaluation from the logs of those that succeeded.
  void ReadTrainerProgress(const std::string& ns, const std::string& name, Observed* in);
  // Fills in->pods and in->service of job `name` in `ns` from the caches (in->job set). A
  // Service of the job's name that in->job does not own is left out.
  void ReadOwned(const std::string& ns, const std::string& name, Observed* in);
  // in->queue of a job labelled kueue.x-k8s.io/queue-name: its Workload, the flavors the
  // Workload's admission assigns, and (while it has no Workload) its WorkloadPriorityClass,
  // from the caches where they are watched, else from the API server.
  Status ReadQueue(const std::string& ns, Observed* in);
  // in->pod_groups: the job's PodGroups of each watched kind, from the caches.
  void ReadPodGroups(const std::string& ns, const std::string& name, Observed* in) const;
  // in->nodes: the nodes in->pods are bound to, from the node cache (nothing when nodes are not
  // watched); in->in_place_nodes where gangs may restart in place.
  void ReadNodes(Observed* in) const;
  // SayInPlaceChoice of what a pass read.
  void SayInPlaceChoice(const std::optional<InPlaceNodes>& nodes);
  // The object `name` of `r` in `ns` as the cache shows it, else as the API server does;
  // nullopt when there is none.
  StatusOr<std::optional<nlohmann::json>> ReadExisting(const kube::Resource& r,
                                                       const std::string& ns,
                                                       const std::string& name);
  Status Apply(const std::string& key, const nlohmann::json& job, const Decision& d);
  // A kPatch, a kUpdateStatus or a create the action judges itself (Action::tolerated,
  // refusable, warn_reason).
  Status Send(const std::string& key, const nlohmann::json& job, const Action& a);
  // Keeps what the API server refused of key's pass for the next one (Observed::refused).
  void Refuse(const std::string& key, const std::string& plural, Refusal refusal);
  // Whether a refusal is kept for key.
  bool Refused(const std::string& key);
  // The refusals kept for key (forgotten).
  std::map<std::string, Refusal> TakeRefusals(const std::string& key);
  Status Create(const std::string& key, const nlohmann::json& job, const Action& a);
  // Creates the rendezvous Secret; one of its name that exists already is this job's (the name
  // carries the job's UID) and is replaced, its key unknown to this pass.
  Status CreateSecret(const std::string& ns, const Action& a);
  // A pod create the API server refused (403 or 422): the first refused pod by name (a
  // batch's creates run concurrently; the same pod each pass keeps the condition's message
  // steady), the condition's reason (Forbidden, Invalid) and message.
  struct CreateRefusal {
    std::string pod, reason, message;
  };
  // After a pass that Apply failed: the condition its refusal recorded (a pod create the API
  // server refused), through WritePassRefused.
  Status WritePassRefusals(const std::string& key, const nlohmann::json& job);
  // Sets condition `type` True (`reason`, `message`) on the job's status as it was before this
  // pass (nothing this pass decided holds: its pods were not created) and writes it; nothing
  // when the condition already says so (the queue's backoff paces the retries).
  Status WritePassRefused(const std::string& key, const nlohmann::json& job, const char* type,
                          const std::string& reason, const std::string& message);
  // Creates the job's NetworkPolicy. A refusal (400, 403 or 422: RBAC, an admission webhook;
  // or one of its name that no TrainingJob owns) does not stop the pass: the job runs without
  // it, and the next pass says so in the condition NetworkPolicyRefused (Refuse).
  // Any other error (the server unreachable, one of its name that a deleted job of the same
  // name still owns) fails the pass, which is retried with backoff before any pod is made.
  Status CreateNetworkPolicy(const std::string& key, const nlohmann::json& job, const Action& a);
  Status CreateAll(const std::string& key, const nlohmann::json& job,
                   const std::vector<const Action*>& creates);
  Status WriteStatus(const std::string& key, const nlohmann::json& job,
                     const nlohmann::json& status);

  // A status computed by a pass and not yet written (StatusDeferral), for the job of `uid`.
  struct KeptStatus {
    std::string uid;
    nlohmann::json status;
    Clock::TimePoint since;  // when the oldest unwritten change was kept
  };
  // The status kept for key's job of `uid`, if any (one kept for an earlier job of the same
  // name is dropped).
  std::optional<KeptStatus> Kept(const std::string& key, const std::string& uid);
  void Keep(const std::string& key, KeptStatus kept);
  void ForgetKept(const std::string& key);

  ExecutorDeps deps_;
  ReconcilerOptions options_;
  Clock* clock_;
  kube::Expectations expectations_;
  LargePassBudget large_passes_;
  Mutex kept_mu_;
  std::map<std::string, KeptStatus> kept_ TJ_GUARDED_BY(kept_mu_);
  Mutex refusals_mu_;
  // Jobs whose pass had a pod create refused: key -> the refusal.
  std::map<std::string, CreateRefusal> create_refusals_ TJ_GUARDED_BY(refusals_mu_);
  // Jobs whose pass had an action refused: key -> the resource's plural -> the refusal.
  std::map<std::string, std::map<std::string, Refusal>> refusals_ TJ_GUARDED_BY(refusals_mu_);
  Mutex in_place_mu_;
  // Why gangs do or do not restart in place, as last said in the log (SayInPlaceChoice).
  std::optional<InPlaceChoice::Because> in_place_said_ TJ_GUARDED_BY(in_place_mu_);
};

// Whether a create that was answered AlreadyExists may count as done: Ok when `existing` (the
// object `object_key` of `kind` as the cache or the API server shows it; nullopt when it is
// gone) is owned by `job`. Otherwise an error that names the object and its owners, and the
// key is retried: a pod, Service or Secret of a deleted job of the same name, or a user's
// object, is never taken as this job's. The same check for pods, Services and Secrets.
Status CheckExistingIsOwned(const std::string& kind, const std::string& object_key,
                            const std::optional<nlohmann::json>& existing,
                            const nlohmann::json& job);

// The bytes of pods that a job's creates send at once, at most: a job of small pods sends
// kMaxParallelCreates of them together, one of pods near the API server's size limit one at a
// time (each in flight costs the operator the pod, its request and the answer, parsed).
inline constexpr size_t kMaxPodBytesInFlight = size_t{2} << 20;
// How many of `pods` pod creates of `job` run at once: kMaxPodBytesInFlight over the job's
// size (a pod is about its template), 1 to kMaxParallelCreates.
size_t ParallelPodCreates(const nlohmann::json& job, size_t pods);

// What a status write sends besides the status: the job's identity and resourceVersion (the
// write's precondition). The status subresource takes only the status from the body (the rest
// of the stored object stays as it is), so the job's spec, however large, is not sent again.
nlohmann::json StatusWriteOf(const nlohmann::json& job);

}  // namespace tj::controller
