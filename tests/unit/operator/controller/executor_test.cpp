// The executor's pure helpers (the final evaluation from a trainer log, metrics text, the
// owner check of a create answered AlreadyExists) and one pass against informer caches and a
// fake client: a Service or Secret of the job's name that another owns is not the job's, and a
// status write gives way to other work (kept, built on, written once idle, at the latest after
// kMaxStatusDelay, or at shutdown); a pass that throws is an error the reconcile workers retry.
// The executor runs against a real API server in tests/e2e/operator/.
#include "operator/controller/executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "operator/api/training_job.h"
#include "operator/controller/cache_transforms.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/kueue_admission.h"
#include "operator/controller/metrics.h"
#include "operator/controller/reconcile_workers.h"
#include "operator/controller/tenant_reads.h"
#include "tests/support/captured_log.h"
#include "tests/support/fake_client.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/operator/controller/test_job.h"

namespace tj::controller {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

TEST(LastEvaluation, TakesTheLastEvaluationLine) {
  const std::string log =
      "{\"event\":\"evaluation\",\"checkpoint\":\"ckpt-1\",\"epoch\":1,\"loss\":0.5,"
      "\"accuracy\":0.8}\n"
      "not json \"evaluation\"\n"
      "{\"event\":\"evaluation\",\"checkpoint\":\"ckpt-final\",\"epoch\":2,\"loss\":0.4,"
      "\"accuracy\":0.85}\n"
      "{\"event\":\"train_end\"}\n";
  nlohmann::json e = LastEvaluation(log);
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["checkpoint"], "ckpt-final");
  EXPECT_EQ(e["accuracy"], 0.85);
  EXPECT_TRUE(LastEvaluation("").is_null());
  EXPECT_TRUE(LastEvaluation("{\"event\":\"evaluation\",\"model\":\"/x\"}").is_null());
}

// A log line is the tenant's: one nested deeper than a status ever is gets skipped before it is
// parsed (a line of 64 KiB of brackets would otherwise be parsed and torn down recursively).
TEST(LastEvaluation, ALineNestedDeeperThanAStatusIsSkipped) {
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  const std::string log =
      "{\"event\":\"evaluation\",\"checkpoint\":\"ckpt-1\",\"accuracy\":0.8}\n"
      "{\"event\":\"evaluation\",\"checkpoint\":\"ckpt-2\",\"accuracy\":0.9,\"x\":" +
      deep + "}\n";
  const nlohmann::json e = LastEvaluation(log);
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["checkpoint"], "ckpt-1");
}

TEST(ParseTenantJson, RefusesDeepNestingAndNonJson) {
  EXPECT_TRUE(ParseTenantJson(R"({"a":[{"b":1}]})").is_object());
  EXPECT_TRUE(ParseTenantJson(std::string(kMaxTrainerStatusNesting + 1, '[') +
                              std::string(kMaxTrainerStatusNesting + 1, ']'))
                  .is_discarded());
  EXPECT_TRUE(ParseTenantJson("not json").is_discarded());
  // Brackets inside strings are text, not nesting.
  EXPECT_TRUE(ParseTenantJson("{\"a\":\"" + std::string(100, '[') + "\"}").is_object());
}

TEST(OperatorMetrics, ControllerRuntimeNamesAndJobCounters) {
  OperatorMetrics m({"1.2.3", "abc123"});
  m.ReconcileDone("success", 0.003);
  m.ReconcileDone("error", 0.2);
  m.ReconcileDone("requeue_after", 3);
  m.JobCreated("team-a");
  m.JobCreated("team-b");
  m.JobRestarted("team-a");
  m.JobRestarted("team-a");
  tj::Histogram waited(tj::Histogram::WorkQueueBuckets());
  waited.Observe(0.5);
  const OperatorMetrics::PollStats polls{7, 3};
  const std::string t = m.Render({4, 10, 2, waited.Snapshot(), {}}, true, nullptr, &polls);
  for (const char* want :
       {"controller_runtime_reconcile_total{controller=\"trainingjob\",result=\"success\"} 1",
        "controller_runtime_reconcile_total{controller=\"trainingjob\",result=\"error\"} 1",
        "controller_runtime_reconcile_errors_total{controller=\"trainingjob\"} 1",
        // NOLINTNEXTLINE(bugprone-suspicious-missing-comma): one long line
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"trainingjob\",le=\"0.005\"} "
        "1",
        "controller_runtime_reconcile_time_seconds_count{controller=\"trainingjob\"} 3",
        "workqueue_depth{name=\"trainingjob\"} 4", "workqueue_adds_total{name=\"trainingjob\"} 10",
        "workqueue_retries_total{name=\"trainingjob\"} 2",
        "leader_election_master_status{name=\"tj-operator\"} 1",
        "tj_operator_jobs_created_total{namespace=\"team-a\"} 1",
        "tj_operator_jobs_created_total{namespace=\"team-b\"} 1",
        "tj_operator_jobs_restarted_total{namespace=\"team-a\"} 2",
        "tj_operator_jobs_restarted_total{namespace=\"team-b\"} 0",
        "# TYPE tj_operator_jobs_failed_total counter",
        "# TYPE workqueue_queue_duration_seconds histogram",
        "workqueue_queue_duration_seconds_bucket{name=\"trainingjob\",le=\"0.1\"} 0",
        "workqueue_queue_duration_seconds_bucket{name=\"trainingjob\",le=\"1\"} 1",
        "workqueue_queue_duration_seconds_count{name=\"trainingjob\"} 1",
        "tj_operator_build_info{version=\"1.2.3\",git_revision=\"abc123\"} 1",
        "tj_operator_trainer_status_polls_total 7", "tj_operator_trainer_status_polls_in_flight 3",
        // This process's own, from /proc.
        "# TYPE process_cpu_seconds_total counter", "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_open_fds gauge", "# TYPE process_max_fds gauge",
        "# TYPE process_start_time_seconds gauge"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
  }
  // Each family declared once, before its samples.
  EXPECT_EQ(t.find("# TYPE controller_runtime_reconcile_total"),
            t.rfind("# TYPE controller_runtime_reconcile_total"));
  // No work_duration snapshot: not rendered.
  EXPECT_EQ(t.find("workqueue_work_duration_seconds"), std::string::npos);
}

// The job's Service, Secret and worker 0 as `owner` builds them, as the operator's caches keep
// them (cache_transforms.h).
std::vector<json> CachedObjectsOf(const json& owner) {
  auto spec = api::ParseSpec(owner["spec"]);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  json service = BuildService(owner, *spec);
  json secret = BuildSecret(owner, "k");
  json pod = BuildPod(owner, *spec, api::ReplicaType::kWorker, 0, 0);
  KeepIdentity(service);
  KeepIdentity(secret);
  TrimPodForCache(pod);
  return {service, secret, pod};
}

TEST(ParallelPodCreates, SmallPodsTogetherPodsNearTheSizeLimitOneAtATime) {
  const json small = TestJob();
  EXPECT_EQ(ParallelPodCreates(small, 1), 1u);
  EXPECT_EQ(ParallelPodCreates(small, 100), kMaxParallelCreates);
  json big = TestJob();
  big["spec"]["replicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["pad"] =
      std::string(size_t{3} << 19, 'x');  // 1.5 MiB: about etcd's request limit
  EXPECT_EQ(ParallelPodCreates(big, 100), 1u);
  big["spec"]["replicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["pad"] =
      std::string(size_t{1} << 18, 'x');  // 256 KiB: 7 at once
  EXPECT_EQ(ParallelPodCreates(big, 100), kMaxPodBytesInFlight / big.dump().size());
}

TEST(LargePassBudget, NearTheSizeLimitOneAtATimeSmallJobsNeverWait) {
  LargePassBudget budget;
  const Clock::TimePoint t0{};
  size_t small = 1, big = 0, second = 0, medium = 0;
  EXPECT_TRUE(budget.TryTake("ns/small", kLargeJobBytes, t0, &small));
  EXPECT_EQ(small, 0u);
  EXPECT_TRUE(budget.TryTake("ns/a", size_t{3} << 20, t0, &big));  // over the budget: all of it
  EXPECT_EQ(big, kLargePassBytes);
  EXPECT_FALSE(budget.TryTake("ns/b", kLargeJobBytes + 1, t0, &second));
  EXPECT_EQ(second, 0u);
  EXPECT_TRUE(budget.TryTake("ns/small", 1000, t0, &small));  // a small job's pass still runs
  budget.Give(big);
  EXPECT_EQ(budget.in_use(), 0u);
  // ns/b waits first: ns/a, back at once, waits behind it.
  EXPECT_FALSE(budget.TryTake("ns/a", kLargePassBytes / 2, t0, &big));
  EXPECT_TRUE(budget.TryTake("ns/b", kLargePassBytes / 2, t0, &second));
  EXPECT_TRUE(budget.TryTake("ns/a", kLargePassBytes / 2, t0, &medium));
  EXPECT_FALSE(budget.TryTake("ns/c", kLargeJobBytes + 1, t0, &big));
  budget.Give(medium);
  budget.Give(second);
  EXPECT_EQ(budget.in_use(), 0u);
  // ns/c waits, then never asks again (deleted): after kLargePassForgetAfter it loses its turn.
  EXPECT_FALSE(budget.TryTake("ns/d", kLargeJobBytes + 1, t0 + std::chrono::seconds(1), &big));
  EXPECT_TRUE(budget.TryTake("ns/d", kLargeJobBytes + 1,
                             t0 + kLargePassForgetAfter + std::chrono::seconds(1), &big));
  budget.Give(big);
}

TEST(StatusWriteOf, SendsTheIdentityAndVersionNotTheSpec) {
  json job = TestJob();
  job["metadata"]["resourceVersion"] = "42";
  job["metadata"]["labels"] = {{"team", "a"}};
  const json w = StatusWriteOf(job);
  EXPECT_EQ(w, (json{{"apiVersion", "tjo.dev/v1alpha1"},
                     {"kind", "TrainingJob"},
                     {"metadata",
                      {{"name", job["metadata"]["name"]},
                       {"namespace", job["metadata"]["namespace"]},
                       {"uid", job["metadata"]["uid"]},
                       {"resourceVersion", "42"}}}}));
}

TEST(CheckExistingIsOwned, TakesTheJobsOwnPodServiceAndSecretAsDone) {
  const json job = TestJob();
  for (const json& o : CachedObjectsOf(job)) {
    const std::string kind = o.value("kind", "");
    EXPECT_TRUE(CheckExistingIsOwned(kind, "ns/" + o["metadata"].value("name", ""), o, job).ok())
        << kind << " " << o.dump();
  }
}

TEST(CheckExistingIsOwned, RefusesAnotherJobsOrAnUnownedPodServiceOrSecret) {
  const json job = TestJob("uid-new");
  // A deleted job of the same name (another uid), its objects still there.
  for (json o : CachedObjectsOf(TestJob("uid-old"))) {
    const std::string kind = o.value("kind", "");
    const std::string key = "ns/" + o["metadata"].value("name", "");
    Status s = CheckExistingIsOwned(kind, key, o, job);
    ASSERT_FALSE(s.ok()) << kind;
    EXPECT_EQ(s.message().rfind(kind + " " + key + " already exists and is not this job's", 0), 0u)
        << s.message();
    EXPECT_NE(s.message().find("uid-old"), std::string::npos) << s.message();
    o["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
    s = CheckExistingIsOwned(kind, key, o, job);
    EXPECT_NE(s.message().find("is being deleted"), std::string::npos) << s.message();
    // A user's object of the same name.
    o["metadata"].erase("ownerReferences");
    o["metadata"].erase("deletionTimestamp");
    s = CheckExistingIsOwned(kind, key, o, job);
    EXPECT_NE(s.message().find("no owner; delete or rename it"), std::string::npos) << s.message();
  }
  Status gone = CheckExistingIsOwned("Service", "ns/mnist", std::nullopt, job);
  EXPECT_NE(gone.message().find("deleted meanwhile"), std::string::npos) << gone.message();
}

using testing::ApiErrorOf;
using testing::FakeClient;
using Verb = FakeClient::Verb;

// One pass of job ns/mnist (uid-new) with informer caches, as the operator runs it.
// The message of the condition `type` of a written status, which must hold with `status` and
// `reason` (a failure otherwise, and "").
std::string ConditionMessage(const json& written, const char* type, const std::string& status,
                             const std::string& reason) {
  const api::TrainingJobStatus st = api::TrainingJobStatus::FromJson(written);
  const api::Condition* c = st.Find(type);
  if (c == nullptr) {
    ADD_FAILURE() << "no condition " << type << " in " << written.dump();
    return "";
  }
  EXPECT_EQ(c->status, status) << type;
  EXPECT_EQ(c->reason, reason) << type;
  return c->message;
}

class ExecutorPass : public ::testing::Test {
 protected:
  ExecutorPass() { jobs_.Upsert(TestJob("uid-new")); }

  StatusOr<std::optional<std::chrono::milliseconds>> Sync() { return executor().Sync("ns/mnist"); }

  // The one executor of the test (its kept statuses and expectations live across passes).
  Executor& executor() {
    if (!executor_) {
      ExecutorDeps deps;
      deps.client = &client_;
      deps.random_key = [this] { return random_key_(); };
      deps.caches = OwnedObjectCaches{&jobs_, &pods_, &services_, &network_policies_};
      deps.kueue = kueue_;
      deps.pod_groups = pod_groups_;
      deps.nodes = nodes_;
      deps.log = log_;
      deps.clock = &clock_;
      deps.status_poller = poller_;
      deps.defer_status = StatusDeferral{[this](const std::string&) { return busy_; },
                                         [this](const std::string& key, milliseconds latest) {
                                           write_later_.emplace_back(key, latest);
                                         }};
      options_.native_pod_groups = native_pod_groups_;
      executor_ = std::make_unique<Executor>(std::move(deps), options_);
    }
    return *executor_;
  }

  // The created objects cached, and their pods running (as the kubelet would start them).
  void StartTheCreatedPods() {
    CacheTheCreatedObjects();
    for (const json& created : client_.Bodies(Verb::kCreate)) {
      if (created.value("kind", "") != "Pod") continue;
      json pod = created;
      pod["status"] = {{"phase", "Running"}, {"podIP", "10.0.0.5"}};
      pods_.Upsert(pod);
    }
  }

  // What the informers would show after the creates so far.
  void CacheTheCreatedObjects() {
    for (const json& o : client_.Bodies(Verb::kCreate)) {
      const std::string kind = o.value("kind", "");
      if (kind == "Pod") pods_.Upsert(o);
      if (kind == "Service") services_.Upsert(o);  // Secrets: never cached, never read
      if (kind == "NetworkPolicy") network_policies_.Upsert(o);
    }
  }

  // The Service or Secret (`kind`) of a deleted job of the same name (uid-old), on the server
  // and, with `in_cache`, in `cache` (without: like a user's object without the job-name label,
  // which no informer of the operator lists).
  void OldObject(const std::string& kind, kube::ObjectCache* cache, bool in_cache) {
    for (const json& o : CachedObjectsOf(TestJob("uid-old"))) {
      if (o.value("kind", "") != kind) continue;
      client_.existing[PluralOf(kind) + "/" + o["metadata"].value("name", "")] = o;
      if (in_cache) cache->Upsert(o);
    }
  }
  // Jobs get their NetworkPolicies, admitting the operator's pods (app=tj in tj-system).
  void WithNetworkPolicies() {
    options_.network_policy = NetworkPolicySettings{"tj-system", {{"app", "tj"}}};
  }

  // After a pass that went through without the job's NetworkPolicy: its pods were made all the
  // same, the next pass came at once and said it, and the message of NetworkPolicyRefused
  // (True) in the status it wrote, which says that they are not isolated.
  std::string NetworkPolicyRefusalOfAPassThatWentOn(
      const StatusOr<std::optional<milliseconds>>& pass) {
    EXPECT_TRUE(pass.ok()) << pass.status().message();
    EXPECT_EQ(CreatedPods().size(), 2u);  // the job runs without it
    if (pass.ok()) {
      EXPECT_EQ(*pass, std::optional<milliseconds>(milliseconds(1)));
    }
    CacheTheCreatedObjects();
    auto next = Sync();
    EXPECT_TRUE(next.ok()) << next.status().message();
    if (StatusWrites().empty()) {
      ADD_FAILURE() << "no status written";
      return "";
    }
    std::string message =
        ConditionMessage(StatusWrites().back(), api::condition::kNetworkPolicyRefused, "True",
                         "NetworkPolicyRefused");
    EXPECT_NE(message.find("not isolated"), std::string::npos) << message;
    return message;
  }

  // Another pass, over the objects made so far as the informers show them: the job's
  // NetworkPolicy, asked for once, is not asked for again.
  void ThePolicyIsNotAskedForAgain() {
    CacheTheCreatedObjects();
    ASSERT_TRUE(Sync().ok());
    EXPECT_EQ(client_.Count(Verb::kCreate, "networkpolicies"), 1);
  }

  // The .status of each status write, in order.
  std::vector<json> StatusWrites() const {
    std::vector<json> out;
    for (const json& o : client_.Bodies(Verb::kUpdateStatus)) {
      out.push_back(o.value("status", json()));
    }
    return out;
  }
  // The objects created ("services/mnist"), the pods created ("pods/<name>") and the objects
  // deleted, in order.
  std::vector<std::string> Created() const { return client_.Keys(Verb::kCreate); }
  std::vector<std::string> CreatedPods() const { return client_.Keys(Verb::kCreate, "pods"); }
  std::vector<std::string> Deleted() const { return client_.Keys(Verb::kDelete); }

  // Every pod create is refused with `code`: 403 Forbidden (as by a namespace's Pod Security
  // Admission level) or 422 Invalid.
  void RefusePods(int code = 403) {
    client_.refuse = [code](const FakeClient::Call& c) -> std::optional<kube::ApiError> {
      if (c.verb != Verb::kCreate || c.resource.plural != "pods") return std::nullopt;
      return ApiErrorOf(code, code == 403 ? "Forbidden" : "Invalid", c.Key() + " refused");
    };
  }
  // Every NetworkPolicy create is answered with `code`: 403 as without RBAC for them in the
  // namespace, 503 as an overloaded API server.
  void FailNetworkPolicies(int code) {
    client_.refuse = FakeClient::Refusing(
        Verb::kCreate,
        code == 403 ? ApiErrorOf(403, "Forbidden", "networkpolicies is forbidden: cannot create")
                    : ApiErrorOf(code, "ServiceUnavailable", "try again later"),
        "networkpolicies");
  }
  // Every PodGroup create is answered with `code`, as by a cluster that does not serve the
  // scheduler's API.
  void FailPodGroups(int code) {
    client_.refuse = FakeClient::Refusing(
        Verb::kCreate,
        ApiErrorOf(code, "NotFound", "the server could not find the requested resource"),
        "podgroups");
  }

  static std::string PluralOf(const std::string& kind) {
    return kind == "Service" ? "services" : kind == "Secret" ? "secrets" : "pods";
  }

  FakeClient client_;
  kube::ObjectCache jobs_, pods_, services_, network_policies_;
  ReconcilerOptions options_;
  FakeClock clock_;
  std::function<std::string()> random_key_ = [] { return std::string("key"); };
  bool busy_ = false;  // whether other keys are queued or in flight
  std::vector<std::pair<std::string, milliseconds>> write_later_;
  TrainerStatusPoller* poller_ = nullptr;  // the executor's, when a test sets it
  // Kueue's objects and the PodGroups as watched (null: read live), and whether the cluster
  // serves native PodGroups.
  KueueCaches kueue_;
  PodGroupCaches pod_groups_;
  bool native_pod_groups_ = false;
  const kube::ObjectCache* nodes_ = nullptr;  // the Nodes as watched (null: not watched)
  EventLog* log_ = nullptr;
  std::unique_ptr<Executor> executor_;
};

TEST_F(ExecutorPass, CreatesTheServiceAndSecretItFindsNotThere) {
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  // The Service and the Secret (together) before any pod.
  const std::vector<std::string> created = Created();
  ASSERT_GE(created.size(), 2u);
  std::set<std::string> first(created.begin(), created.begin() + 2);
  EXPECT_EQ(first, (std::set<std::string>{"services/mnist", "secrets/mnist-rendezvous-uidnew"}))
      << ::testing::PrintToString(created);
  EXPECT_EQ(CreatedPods().size(), created.size() - 2);
}

// The jobs' cache keeps templates as text (CompactTrainingJob): a pass reads them parsed and
// builds the same pods from them.
TEST_F(ExecutorPass, BuildsTheSamePodsFromACompactCachedJob) {
  const json whole = TestJob("uid-new");
  json job = whole;
  CompactTrainingJob(job);
  jobs_.Upsert(job);
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto spec = api::ParseSpec(whole["spec"]);
  ASSERT_TRUE(spec.ok());
  int pods = 0;
  for (const json& o : client_.Bodies(Verb::kCreate)) {
    if (o.value("kind", "") != "Pod") continue;
    const int index = std::stoi(o["metadata"]["labels"].value(api::kLabelReplicaIndex, "0"));
    const json expected = BuildPod(whole, *spec, api::ReplicaType::kWorker, index, 0);
    EXPECT_EQ(o["spec"]["containers"][0]["args"], expected["spec"]["containers"][0]["args"]);
    EXPECT_EQ(o["spec"]["containers"][0]["image"], "tj-trainer");
    ++pods;
  }
  EXPECT_EQ(pods, 2);
}

TEST_F(ExecutorPass, MakesTheJobsNetworkPolicyBeforeItsPods) {
  WithNetworkPolicies();
  ASSERT_TRUE(Sync().ok());
  const std::vector<std::string> created = Created();
  std::set<std::string> first(created.begin(), created.begin() + 3);
  EXPECT_EQ(first, (std::set<std::string>{"services/mnist", "secrets/mnist-rendezvous-uidnew",
                                          "networkpolicies/mnist-pods"}))
      << ::testing::PrintToString(created);
  // Once the cache shows it, it is not asked for again.
  ThePolicyIsNotAskedForAgain();
}

TEST_F(ExecutorPass, ARefusedNetworkPolicyLeavesTheJobRunningAndSaysWhatToDo) {
  WithNetworkPolicies();
  FailNetworkPolicies(403);
  const std::string message = NetworkPolicyRefusalOfAPassThatWentOn(Sync());
  EXPECT_NE(message.find("refused NetworkPolicy ns/mnist-pods"), std::string::npos) << message;
  EXPECT_NE(message.find("networkpolicies"), std::string::npos) << message;
  // The next passes, within the retry time, do not ask again.
  json job = TestJob("uid-new");
  job["status"] = StatusWrites().back();
  job["metadata"]["resourceVersion"] = "2";
  jobs_.Upsert(job);
  ThePolicyIsNotAskedForAgain();
}

// Not a refusal: the pass fails and is retried, and no pod is made without its policy.
TEST_F(ExecutorPass, ANetworkPolicyCreateThatFailsForNowHoldsThePodsBack) {
  WithNetworkPolicies();
  FailNetworkPolicies(503);
  auto r = Sync();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("networkpolicies ns/mnist-pods"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE(CreatedPods().empty());
  for (const json& s : StatusWrites()) {
    EXPECT_EQ(s.dump().find("NetworkPolicyRefused"), std::string::npos) << s.dump();
  }
  client_.refuse = nullptr;
  CacheTheCreatedObjects();  // the Service and Secret it made
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(CreatedPods().size(), 2u);
}

// A deleted job's policy of the same name (the garbage collector has yet to remove it) is
// waited for, as its Service would be; a policy of that name that no TrainingJob owns (a
// user's) is a refusal: the job runs, and says so.
TEST_F(ExecutorPass, AnEarlierJobsNetworkPolicyIsWaitedForAUsersIsARefusal) {
  WithNetworkPolicies();
  const json old_job = TestJob("uid-old");
  json earlier =
      BuildNetworkPolicy(old_job, *api::ParseSpec(old_job["spec"]), *options_.network_policy);
  client_.existing["networkpolicies/mnist-pods"] = earlier;
  auto r = Sync();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("NetworkPolicy ns/mnist-pods already exists"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(CreatedPods().empty());

  earlier["metadata"].erase("ownerReferences");
  client_.existing["networkpolicies/mnist-pods"] = earlier;
  CacheTheCreatedObjects();
  const std::string message = NetworkPolicyRefusalOfAPassThatWentOn(Sync());
  EXPECT_NE(message.find("is not this job's"), std::string::npos) << message;
}

// Another controller's job: the pass sends nothing to the API server, not even a status.
TEST_F(ExecutorPass, SendsNothingForAJobManagedByAnotherController) {
  json job = TestJob("uid-new");
  job["spec"]["managedBy"] = "example.com/other";
  jobs_.Upsert(job);
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(*r);  // no requeue: the field is immutable
  EXPECT_TRUE(Created().empty()) << ::testing::PrintToString(Created());
  EXPECT_TRUE(StatusWrites().empty());
  EXPECT_TRUE(Deleted().empty());
  EXPECT_TRUE(write_later_.empty());
}

TEST_F(ExecutorPass, TakesItsOwnServiceWhenTheCacheLagsBehind) {
  // Created by an earlier pass; the cache does not show it yet. (A Secret the status does not
  // record is never taken, nor replaced: NeverDeletesASecretItDidNotMake... below.)
  for (const json& o : CachedObjectsOf(TestJob("uid-new"))) {
    const std::string kind = o.value("kind", "");
    if (kind == "Service") client_.existing["services/" + o["metadata"].value("name", "")] = o;
  }
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(Created().empty());  // its pods
}

TEST_F(ExecutorPass, DoesNotTakeADeletedJobsCachedServiceAsItsOwn) {
  OldObject("Service", &services_, /*in_cache=*/true);
  auto r = Sync();
  ASSERT_FALSE(r.ok()) << "the old job's Service was taken as the new job's";
  EXPECT_NE(r.status().message().find("Service ns/mnist already exists and is not this job's"),
            std::string::npos)
      << r.status().message();
  // Its own Secret may be created alongside; no pod is created while the Service is another's.
  EXPECT_TRUE(CreatedPods().empty()) << ::testing::PrintToString(Created());
}

// A Secret of the rendezvous Secret's name that the job's status does not record: made by a
// leader that stopped before it wrote the status (or planted under the job's name). Its name
// carries the job's UID, so it is this job's; the operator cannot read its key, so it replaces
// it with the new one and the job goes on. Before, a Secret of the job's name (without its UID)
// was refused with a condition, and a job whose leader stopped there waited for good.
TEST_F(ExecutorPass, ReplacesASecretOfItsNameThatItsStatusDoesNotRecord) {
  client_.existing["secrets/mnist-rendezvous-uidnew"] =
      BuildSecret(TestJob("uid-new"), "a key of a pass that wrote no status");
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Deleted(), std::vector<std::string>{"secrets/mnist-rendezvous-uidnew"});
  EXPECT_EQ(CreatedPods().size(), 2u);
  EXPECT_EQ(client_.Count(Verb::kGet, "secrets"), 0) << "a Get: the operator may not read Secrets";
  ASSERT_FALSE(StatusWrites().empty());
  api::TrainingJobStatus st = api::TrainingJobStatus::FromJson(StatusWrites().back());
  EXPECT_EQ(st.rendezvous_key_hash, KeyHash("key"));
  EXPECT_EQ(st.Find(api::condition::kRendezvousSecretConflict), nullptr);
}

// The Secret of another job of the same name (a deleted one, not yet collected) has another
// name: the new job makes its own beside it and deletes nothing.
TEST_F(ExecutorPass, MakesItsOwnSecretBesideADeletedJobsOfTheSameName) {
  kube::ObjectCache unused;
  OldObject("Secret", &unused, /*in_cache=*/false);
  ASSERT_EQ(client_.existing.count("secrets/mnist-rendezvous-uidold"), 1u);
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(Deleted().empty()) << Deleted().front();
  EXPECT_EQ(CreatedPods().size(), 2u);
  EXPECT_EQ(client_.existing.count("secrets/mnist-rendezvous-uidold"), 1u);
}

// A job whose status still carries RendezvousSecretConflict (set by an operator before the
// Secret's name carried the job's UID) loses it.
TEST_F(ExecutorPass, DropsTheRendezvousSecretConflictOfAnOlderOperator) {
  json job = TestJob("uid-new");
  job["status"]["conditions"] =
      json::array({{{"type", api::condition::kRendezvousSecretConflict},
                    {"status", "True"},
                    {"reason", "SecretNotOwned"},
                    {"message", "Secret ns/mnist-rendezvous already exists"},
                    {"lastTransitionTime", "2026-01-01T00:00:00Z"}}});
  jobs_.Upsert(job);
  ASSERT_TRUE(Sync().ok());
  ASSERT_FALSE(StatusWrites().empty());
  api::TrainingJobStatus st = api::TrainingJobStatus::FromJson(StatusWrites().back());
  EXPECT_EQ(st.Find(api::condition::kRendezvousSecretConflict), nullptr);
}

// A pass that made the Secret and then failed (its pods refused) wrote no status: the next
// pass finds the Secret it made itself for this job, replaces it with the new key and goes on.
TEST_F(ExecutorPass, ReplacesTheSecretItMadeWhenItsPassFailedBeforeTheStatus) {
  client_.keep_writes = true;
  RefusePods();
  auto r = Sync();
  ASSERT_FALSE(r.ok()) << "the pods were refused";
  EXPECT_TRUE(CreatedPods().empty());
  CacheTheCreatedObjects();  // the informers catch up (the Service)
  client_.refuse = nullptr;
  r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Deleted(), std::vector<std::string>{"secrets/mnist-rendezvous-uidnew"});
  EXPECT_EQ(CreatedPods().size(), 2u);
  ASSERT_FALSE(StatusWrites().empty());
  api::TrainingJobStatus st = api::TrainingJobStatus::FromJson(StatusWrites().back());
  EXPECT_EQ(st.rendezvous_key_hash, KeyHash("key"));
}

// A pass of a queued job whose gang is scheduled together, with Kueue's objects and the
// PodGroups watched (as the operator runs where it may list them): its Workload, flavor and
// PodGroup come from the caches, its pods and Service from the informers, and the API server
// is asked nothing; only creates and the status write go to it.
TEST_F(ExecutorPass, AQueuedGangJobsPassReadsNothingLive) {
  json job = TestJob("uid-new");
  job["metadata"]["labels"][kueue::kQueueNameLabel] = "queue";
  jobs_.Upsert(job);
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok());
  json wl = kueue::BuildWorkload(job, *spec);
  wl["status"] = {
      {"conditions",
       json::array({{{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "QuotaReserved"}},
                    {{"type", "Admitted"}, {"status", "True"}, {"reason", "Admitted"}}})},
      {"admission",
       {{"clusterQueue", "cq"},
        {"podSetAssignments", json::array({{{"name", "worker"}, {"flavors", {{"cpu", "f"}}}}})}}}};
  kube::ObjectCache workloads, flavors, classes, groups;
  workloads.Upsert(wl);
  flavors.Upsert({{"metadata", {{"name", "f"}}}, {"spec", {{"nodeLabels", {{"pool", "a"}}}}}});
  kueue_ = {&workloads, &flavors, &classes};
  pod_groups_.by_kind[static_cast<size_t>(gang::Kind::kNative)] = &groups;
  native_pod_groups_ = true;  // schedulingPolicy.gang Auto: a native PodGroup per gang
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(CreatedPods().size(), 2u);
  const std::vector<std::string> created = Created();
  EXPECT_EQ(std::count(created.begin(), created.end(), "podgroups/mnist-gang-0"), 1);
  EXPECT_EQ(client_.Count(Verb::kGet) + client_.Count(Verb::kList), 0)
      << "a live read on a pass of a queued gang job";
}

// A pod of the job stuck terminating on a node that is not Ready: the pass reads the node from
// the node cache and force-deletes the pod, gracePeriodSeconds 0 and its UID the precondition.
// A 409 of that precondition (the name is a newer pod's by now) leaves the pass going on.
TEST_F(ExecutorPass, ForceDeletesAPodStuckOnALostNodeWithItsUidAsThePrecondition) {
  const auto now = std::chrono::system_clock::now();
  const json job = TestJob("uid-new");
  json pod = BuildPod(job, *api::ParseSpec(job["spec"]), api::ReplicaType::kWorker, 1, 0);
  pod["metadata"]["uid"] = "pod-uid-1";
  pod["metadata"]["deletionTimestamp"] = kube::FormatTime(now - std::chrono::minutes(10));
  pod["metadata"]["deletionGracePeriodSeconds"] = 30;
  pod["spec"]["nodeName"] = "node-b";
  TrimPodForCache(pod);
  pods_.Upsert(pod);
  json node = {
      {"metadata", {{"name", "node-b"}}},
      {"status",
       {{"conditions",
         json::array({{{"type", "Ready"},
                       {"status", "Unknown"},
                       {"lastTransitionTime", kube::FormatTime(now - std::chrono::hours(1))}}})}}}};
  kube::ObjectCache nodes;
  nodes.Upsert(node);
  nodes_ = &nodes;
  client_.existing["pods/mnist-worker-1"] = {
      {"metadata", {{"name", "mnist-worker-1"}, {"uid", "a-newer-pod"}}}};
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<FakeClient::Call> deletes = client_.Calls(Verb::kDelete, "pods");
  ASSERT_EQ(deletes.size(), 1u);
  EXPECT_EQ(deletes[0].name, "mnist-worker-1");
  EXPECT_EQ(deletes[0].body,
            (json{{"gracePeriodSeconds", 0}, {"preconditions", {{"uid", "pod-uid-1"}}}}));
  EXPECT_FALSE(deletes[0].ok) << "409: another pod of the name";
  EXPECT_TRUE(client_.existing.contains("pods/mnist-worker-1")) << "the newer pod stays";
}

// A Node as the node cache keeps it: Ready `ready`, cordoned or not, declaring the in-place
// restart feature or not.
json CachedNode(const std::string& name, const std::string& ready, bool declares,
                bool unschedulable = false) {
  json node = {{"metadata", {{"name", name}}},
               {"spec", {{"unschedulable", unschedulable}}},
               {"status",
                {{"conditions", json::array({{{"type", "Ready"}, {"status", ready}}})},
                 {"declaredFeatures", json::array({"SidecarContainers"})}}}};
  if (declares) node["status"]["declaredFeatures"].push_back(kRestartAllContainersFeature);
  TrimNodeForCache(node);
  return node;
}

// Only the nodes that take new pods count, by whether they declare the feature; the index
// follows a node's changes.
TEST(CountInPlaceNodes, CountsTheNodesThatTakeNewPodsByWhetherTheyDeclareTheFeature) {
  kube::ObjectCache nodes;
  IndexNodesForInPlace(nodes);
  EXPECT_EQ(CountInPlaceNodes(nodes), (InPlaceNodes{0, 0, ""}));
  nodes.Upsert(CachedNode("node-a", "True", true));
  nodes.Upsert(CachedNode("node-b", "True", true));
  nodes.Upsert(CachedNode("node-c", "Unknown", false));     // lost: takes no pod
  nodes.Upsert(CachedNode("node-d", "True", false, true));  // cordoned
  EXPECT_EQ(CountInPlaceNodes(nodes), (InPlaceNodes{2, 0, ""}));
  nodes.Upsert(CachedNode("node-d", "True", false));  // uncordoned
  nodes.Upsert(CachedNode("node-e", "True", false));
  EXPECT_EQ(CountInPlaceNodes(nodes), (InPlaceNodes{2, 2, "node-d"}));
  nodes.Upsert(CachedNode("node-b", "False", true));
  nodes.Remove("node-d");
  EXPECT_EQ(CountInPlaceNodes(nodes), (InPlaceNodes{1, 1, "node-e"}));
}

// Where gangs may restart in place (--restart-in-place=auto on 1.36+), a pass reads the node
// cache: a gang is made with the in-place rules when every node that takes new pods declares
// the feature, and without when one does not. The log says which once, and again when it
// changes; an operator that does not watch nodes makes its gangs again and says why.
class InPlacePass : public ExecutorPass {
 protected:
  InPlacePass() {
    log_ = captured_.log();
    options_.restart_in_place = true;
    IndexNodesForInPlace(nodes_cache_);
    nodes_ = &nodes_cache_;
  }
  // Whether the created pod `pod` has the in-place rules.
  bool RulesOf(const std::string& pod) {
    for (const json& b : client_.Bodies(Verb::kCreate)) {
      if (b["metadata"].value("name", "") == pod) {
        return b["spec"]["containers"][0].contains("restartPolicyRules");
      }
    }
    ADD_FAILURE() << "no pod " << pod << " created";
    return false;
  }
  // The restart_in_place lines of the log so far.
  std::vector<std::string> Said() {
    std::vector<std::string> lines;
    std::string out = captured_.Stdout();
    for (size_t at = 0, end; at < out.size(); at = end + 1) {
      end = out.find('\n', at);
      if (end == std::string::npos) end = out.size();
      std::string line = out.substr(at, end - at);
      if (line.find(R"("event":"restart_in_place")") != std::string::npos) lines.push_back(line);
    }
    return lines;
  }
  testing::CapturedLog captured_;
  kube::ObjectCache nodes_cache_;
};

TEST_F(InPlacePass, AGangIsMadeAgainWhereANodeLacksTheFeature) {
  nodes_cache_.Upsert(CachedNode("node-a", "True", true));
  nodes_cache_.Upsert(CachedNode("node-b", "True", false));
  executor().SayInPlaceChoice();  // as the operator does once its informers have synced
  ASSERT_TRUE(Sync().ok());
  CacheTheCreatedObjects();
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(CreatedPods().size(), 2u);
  EXPECT_FALSE(RulesOf("mnist-worker-0"));
  EXPECT_FALSE(RulesOf("mnist-worker-1"));
  const std::vector<std::string> said = Said();
  ASSERT_EQ(said.size(), 1u) << "once, not on every pass";
  EXPECT_NE(said[0].find(R"("enabled":false)"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("node node-b of the 2 ready, schedulable nodes does not declare "
                         "RestartAllContainersOnContainerExits"),
            std::string::npos)
      << said[0];
}

TEST_F(InPlacePass, AGangRestartsInPlaceWhereEveryNodeDeclaresTheFeature) {
  nodes_cache_.Upsert(CachedNode("node-a", "True", true));
  nodes_cache_.Upsert(CachedNode("node-b", "True", true));
  nodes_cache_.Upsert(CachedNode("node-c", "True", false, /*unschedulable=*/true));
  ASSERT_TRUE(Sync().ok());
  EXPECT_TRUE(RulesOf("mnist-worker-0"));
  EXPECT_TRUE(RulesOf("mnist-worker-1"));
  std::vector<std::string> said = Said();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find(R"("enabled":true,"why":"every one of the 2 ready, schedulable nodes)"),
            std::string::npos)
      << said[0];
  // node-c uncordoned, without the feature: the next pass says so.
  nodes_cache_.Upsert(CachedNode("node-c", "True", false));
  CacheTheCreatedObjects();
  ASSERT_TRUE(Sync().ok());
  said = Said();
  ASSERT_EQ(said.size(), 2u);
  EXPECT_NE(said[1].find(R"("enabled":false)"), std::string::npos) << said[1];
  EXPECT_NE(said[1].find("node node-c of the 3"), std::string::npos) << said[1];
}

TEST_F(InPlacePass, WithoutTheNodesGangsAreMadeAgain) {
  nodes_ = nullptr;  // the operator may not list them
  ASSERT_TRUE(Sync().ok());
  CacheTheCreatedObjects();
  ASSERT_TRUE(Sync().ok());
  EXPECT_FALSE(RulesOf("mnist-worker-0"));
  const std::vector<std::string> said = Said();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find(R"("enabled":false,"why":"the operator does not watch nodes)"),
            std::string::npos)
      << said[0];
}

TEST_F(ExecutorPass, SaysNothingOfNodesWhereGangsMayNotRestartInPlace) {
  testing::CapturedLog captured;
  log_ = captured.log();
  executor().SayInPlaceChoice();
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(captured.Stdout().find("restart_in_place"), std::string::npos) << captured.Stdout();
  EXPECT_FALSE(client_.Bodies(Verb::kCreate).empty());
}

// The gang's PodGroup is created before its pods, and a pod is not created without it: a
// scheduler's API the cluster does not serve is an error that says what to do; a group of the
// name that another owns (the kind not watched: its create's AlreadyExists read live) holds the
// pods back too.
TEST_F(ExecutorPass, AGangsPodGroupOfAnotherOwnerHoldsThePodsBack) {
  json job = TestJob("uid-new");
  job["spec"]["runPolicy"]["schedulingPolicy"] = {{"gang", "Volcano"}};
  jobs_.Upsert(job);
  FailPodGroups(404);
  auto r = Sync();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("must serve scheduling.volcano.sh/v1beta1 podgroups"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(CreatedPods().empty());

  client_.refuse = nullptr;
  json theirs = gang::BuildPodGroup(gang::Kind::kVolcano, job, *api::ParseSpec(job["spec"]), 0);
  theirs["metadata"]["ownerReferences"][0]["uid"] = "someone-else";
  client_.existing["podgroups/mnist-gang-0"] = theirs;
  CacheTheCreatedObjects();
  r = Sync();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mnist-gang-0 already exists and is not this job's"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(CreatedPods().empty());

  client_.existing["podgroups/mnist-gang-0"]["metadata"]["ownerReferences"][0]["uid"] = "uid-new";
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(CreatedPods().size(), 2u) << "its own, made by an earlier pass";
}

// A namespace whose Pod Security Admission level (or a quota, a webhook) refuses the job's pods:
// the refusal is the PodCreateRefused condition, with the API server's message, written once;
// the pass fails (the queue's backoff paces the retries). Before, only an Event said so.
TEST_F(ExecutorPass, APodCreateRefusedIsAConditionWrittenOnce) {
  RefusePods();
  auto r = Sync();
  ASSERT_FALSE(r.ok()) << "the pods were refused";
  EXPECT_TRUE(CreatedPods().empty());
  ASSERT_EQ(StatusWrites().size(), 1u);
  const std::string message =
      ConditionMessage(StatusWrites()[0], api::condition::kPodCreateRefused, "True", "Forbidden");
  EXPECT_NE(message.find("the API server refused pod ns/mnist-worker-0: pods/mnist-worker-0 "
                         "refused (the namespace's Pod Security Admission level"),
            std::string::npos)
      << message;

  // Refused again: the same condition, nothing written (no write, no watch event, no pass).
  CacheTheCreatedObjects();  // the informers catch up (the Service)
  json job = TestJob("uid-new");
  job["status"] = StatusWrites().back();
  jobs_.Upsert(job);
  r = Sync();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(StatusWrites().size(), 1u);

  // Accepted (the namespace's label changed): the pods are made and the condition turns False.
  client_.refuse = nullptr;
  r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(CreatedPods().size(), 2u);
  ConditionMessage(StatusWrites().back(), api::condition::kPodCreateRefused, "False",
                   "PodsCreated");
}

// A chief that accepts and never answers /status (behind a default-deny NetworkPolicy that
// drops, a silent program) costs a pass nothing: the pass only reads the poller's last answer.
// The answer, once it comes, requeues the job, and the next pass writes it as progress.
TEST_F(ExecutorPass, APassNeverWaitsForAChiefThatDoesNotAnswer) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int asked = 0;
  std::vector<std::string> requeued;
  auto poller = std::make_unique<TrainerStatusPoller>(
      [&](const PodView&) -> std::optional<json> {
        std::unique_lock<std::mutex> lock(mu);
        ++asked;
        cv.notify_all();
        cv.wait(lock, [&] { return release; });
        return json{{"epoch", 2}, {"step", 7}};
      },
      [&](const std::string& key) {
        std::lock_guard<std::mutex> lock(mu);
        requeued.push_back(key);
        cv.notify_all();
      },
      4, milliseconds(0), &clock_);
  poller_ = poller.get();
  ASSERT_TRUE(Sync().ok());
  StartTheCreatedPods();
  auto pass = std::async(std::launch::async, [this] { return Sync(); });
  const bool ended = pass.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return asked > 0; }))
        << "the chief was never asked";
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(ended) << "the pass waited for the chief's /status";
  ASSERT_TRUE(pass.get().ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return !requeued.empty(); }))
        << "the answer did not requeue the job";
    EXPECT_EQ(requeued.front(), "ns/mnist");
  }
  ASSERT_TRUE(Sync().ok());
  ASSERT_FALSE(StatusWrites().empty());
  const json progress = StatusWrites().back().value("progress", json::object());
  EXPECT_EQ(progress.value("epoch", -1), 2) << StatusWrites().back().dump();
  executor_.reset();  // before the poller it points to
  poller_ = nullptr;
}

// A running trainer's answer changes with every step. Passes come from the requeues the
// executor asks for and from the answers that change (as the work queue runs them); over a
// minute of the fake clock, the chief is polled and the status written once per period
// (ReconcilerOptions::progress_poll, 5 s), not once per answer: before, each changed answer
// requeued the job, and each pass started a new poll, back to back.
TEST_F(ExecutorPass, ARunningJobIsPolledAndItsStatusWrittenOncePerPeriod) {
  std::atomic<int> step{0};
  std::atomic<bool> requeued{false};
  auto poller = std::make_unique<TrainerStatusPoller>(
      [&](const PodView&) -> std::optional<json> {
        // What the tenant sends beside the fields the operator copies is dropped at once.
        return json{{"epoch", 1}, {"step", ++step}, {"padding", std::string(60000, 'x')}};
      },
      [&](const std::string&) { requeued = true; }, 16, std::chrono::seconds(5), &clock_);
  poller_ = poller.get();
  ASSERT_TRUE(Sync().ok());
  StartTheCreatedPods();
  const size_t writes_before = StatusWrites().size();
  int passes = 0;
  auto due = clock_.Now();
  for (int tick = 0; tick < 600; ++tick) {  // 60 s in steps of 100 ms
    if (requeued.exchange(false) || clock_.Now() >= due) {
      const size_t written = StatusWrites().size();
      auto r = Sync();
      ASSERT_TRUE(r.ok()) << r.status().message();
      ++passes;
      if (StatusWrites().size() > written) {  // what the job informer then shows
        json job = TestJob("uid-new");
        job["status"] = StatusWrites().back();
        jobs_.Upsert(job);
      }
      due = *r ? clock_.Now() + **r : Clock::TimePoint::max();
      for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
           poller->in_flight() > 0 && std::chrono::steady_clock::now() < until;) {
        std::this_thread::sleep_for(milliseconds(1));
      }
      ASSERT_EQ(poller->in_flight(), 0) << "a poll of an answering fake did not end";
    }
    clock_.Advance(milliseconds(100));
  }
  // 12 periods in a minute, and the first poll at once.
  EXPECT_GE(poller->polls(), 11u);
  EXPECT_LE(poller->polls(), 13u);
  const size_t writes = StatusWrites().size() - writes_before;
  EXPECT_GE(writes, 10u);
  EXPECT_LE(writes, 14u);
  EXPECT_LE(passes, 2 * 13 + 2);  // the period's pass and the one its answer brings
  ASSERT_FALSE(StatusWrites().empty());
  const json progress = StatusWrites().back().value("progress", json::object());
  EXPECT_EQ(progress.value("step", -1), step.load()) << progress.dump();
  EXPECT_EQ(StatusWrites().back().dump().find("xxxx"), std::string::npos);
  executor_.reset();  // before the poller it points to
  poller_ = nullptr;
}

// A pod the cluster's validation refuses (a privileged container where the API server does not
// allow them: "disallowed by cluster policy") is said the same way, reason Invalid.
TEST_F(ExecutorPass, AnInvalidPodIsAConditionToo) {
  RefusePods(422);
  ASSERT_FALSE(Sync().ok());
  ASSERT_EQ(StatusWrites().size(), 1u);
  const std::string message =
      ConditionMessage(StatusWrites()[0], api::condition::kPodCreateRefused, "True", "Invalid");
  EXPECT_NE(message.find("pods/mnist-worker-0 refused (the pod template, as this cluster "
                         "validates it)"),
            std::string::npos)
      << message;
}

// Status writes give way to other work (StatusDeferral).
TEST_F(ExecutorPass, WritesTheStatusAtOnceWhenNothingElseIsWaiting) {
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(StatusWrites().size(), 1u);
  EXPECT_EQ(StatusWrites()[0].value("createdGeneration", -1), 0);
  EXPECT_TRUE(write_later_.empty());
}

TEST_F(ExecutorPass, KeepsTheStatusWhileBusyAndWritesItOnceIdle) {
  busy_ = true;
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(CreatedPods().size(), 2u) << "creates are never deferred";
  EXPECT_TRUE(StatusWrites().empty());
  ASSERT_EQ(write_later_.size(), 1u);
  EXPECT_EQ(write_later_[0].first, "ns/mnist");
  EXPECT_LE(write_later_[0].second, kMaxStatusDelay + milliseconds(1));
  EXPECT_GT(write_later_[0].second, milliseconds(0));

  // A pass while still busy starts from the kept status: the pods it finds were created by
  // gang 0 (not missing ones), and nothing is created twice.
  CacheTheCreatedObjects();
  clock_.Advance(std::chrono::seconds(1));
  r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(StatusWrites().empty());
  EXPECT_EQ(CreatedPods().size(), 2u);
  ASSERT_EQ(write_later_.size(), 2u);
  EXPECT_LE(write_later_[1].second, kMaxStatusDelay - std::chrono::seconds(1) + milliseconds(1))
      << "the latest time counts from the first kept status";

  busy_ = false;
  r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(StatusWrites().size(), 1u);
  const auto st = api::TrainingJobStatus::FromJson(StatusWrites()[0]);
  EXPECT_TRUE(st.IsTrue(api::condition::kCreated));
  EXPECT_EQ(st.created_generation, 0);
}

TEST_F(ExecutorPass, WritesAKeptStatusAfterTheLongestDelayEvenWhileBusy) {
  busy_ = true;
  ASSERT_TRUE(Sync().ok());
  EXPECT_TRUE(StatusWrites().empty());
  CacheTheCreatedObjects();
  clock_.Advance(kMaxStatusDelay);
  auto r = Sync();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(StatusWrites().size(), 1u);
}

TEST_F(ExecutorPass, WritesTheKeptStatusesAtShutdown) {
  busy_ = true;
  ASSERT_TRUE(Sync().ok());
  EXPECT_TRUE(StatusWrites().empty());
  EXPECT_EQ(executor().WriteKeptStatuses(), 1);
  ASSERT_EQ(StatusWrites().size(), 1u);
  EXPECT_EQ(StatusWrites()[0].value("createdGeneration", -1), 0);
  EXPECT_EQ(executor().WriteKeptStatuses(), 0);  // nothing kept twice
}

TEST_F(ExecutorPass, DropsTheKeptStatusOfADeletedJob) {
  busy_ = true;
  ASSERT_TRUE(Sync().ok());
  jobs_.Remove("ns/mnist");
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(executor().WriteKeptStatuses(), 0);
  EXPECT_TRUE(StatusWrites().empty());
}

// What reconcile workers run with in a test: a log into a temporary file, metrics, a queue.
struct WorkerRig {
  WorkerRig() : out(std::tmpfile()), log(LogFormat::kJson, out, out), queue(RealClock::Get()) {}
  ~WorkerRig() {
    if (out != nullptr) std::fclose(out);
  }
  WorkerRig(const WorkerRig&) = delete;
  WorkerRig& operator=(const WorkerRig&) = delete;
  // Everything logged so far.
  std::string Logged() { return testing::ReadAll(out); }

  FILE* out;
  EventLog log;
  OperatorMetrics metrics;
  kube::WorkQueue queue;
  std::atomic<bool> leading{true};
};

// An exception out of a pass (here: no random key for the rendezvous Secret) is an error for
// that job, logged and retried with backoff; the worker lives on to take the next key.
TEST_F(ExecutorPass, AnExceptionInAPassIsAnErrorNotTheEndOfTheWorker) {
  std::atomic<int> calls{0};
  random_key_ = [&calls]() -> std::string {
    if (++calls <= 2) throw std::runtime_error("no entropy");
    return "key";
  };
  WorkerRig rig;
  ASSERT_NE(rig.out, nullptr);
  {
    auto workers =
        StartReconcileWorkers(1, &rig.queue, &executor(), &rig.metrics, &rig.log, &rig.leading);
    rig.queue.Add("ns/mnist");
    for (int i = 0; i < 500 && CreatedPods().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    rig.queue.ShutDown();
  }
  EXPECT_EQ(calls.load(), 3);
  EXPECT_FALSE(CreatedPods().empty()) << "the third pass, after two that threw, creates";
  const std::string text = rig.Logged();
  EXPECT_NE(text.find("reconciling ns/mnist: internal error (please report it): no entropy"),
            std::string::npos)
      << text;
}

// /healthz: a worker whose pass does not end (here: a pass blocked in its random key) shows as
// stuck once its pass is older than the limit, naming the key; an idle worker never does.
TEST_F(ExecutorPass, AWorkerStuckInOnePassFailsTheLivenessCheck) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, inside = false;
  random_key_ = [&]() -> std::string {
    std::unique_lock<std::mutex> lock(mu);
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    return "key";
  };
  WorkerRig rig;
  ASSERT_NE(rig.out, nullptr);
  WorkerPasses passes(1);
  EXPECT_EQ(StuckWorker(passes, std::chrono::milliseconds(0)), "") << "idle is not stuck";
  {
    auto workers = StartReconcileWorkers(1, &rig.queue, &executor(), &rig.metrics, &rig.log,
                                         &rig.leading, &passes);
    rig.queue.Add("ns/mnist");
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return inside; }));
    }
    const auto later = WorkerPasses::Clock::now() + std::chrono::minutes(6);
    EXPECT_EQ(StuckWorker(passes, kMaxPassDuration), "") << "a pass just begun is not stuck";
    const std::string stuck = StuckWorker(passes, kMaxPassDuration, later);
    EXPECT_NE(stuck.find("one pass of ns/mnist has run for 36"), std::string::npos) << stuck;
    EXPECT_NE(stuck.find("(limit 300 s)"), std::string::npos) << stuck;
    {
      std::lock_guard<std::mutex> lock(mu);
      release = true;
    }
    cv.notify_all();
    for (int i = 0; i < 500 && passes.Oldest().has_value(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(passes.Oldest().has_value()) << "the pass ended";
    EXPECT_EQ(StuckWorker(passes, kMaxPassDuration, later), "");
    rig.queue.ShutDown();
  }
}

}  // namespace
}  // namespace tj::controller
