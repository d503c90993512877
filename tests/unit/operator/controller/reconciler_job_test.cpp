// The job's life (operator/controller/reconciler_job.cpp): created, Running, Succeeded by the
// success policy, Failed by deadlines, an invalid spec or an image that cannot start, suspended
// and resumed, cleaned up and deleted after its TTL; jobs of other controllers left alone.
#include <gtest/gtest.h>

#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

TEST(Reconcile, NewJobCreatesServiceSecretAndEveryPod) {
  World w;
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Created(d), (std::vector<std::string>{"services/mnist", "secrets/mnist-rendezvous-uid1",
                                                  "pods/mnist-worker-0", "pods/mnist-worker-1",
                                                  "pods/mnist-evaluator-0"}));
  auto s = StatusOf(d);
  EXPECT_TRUE(s.IsTrue("Created"));
  EXPECT_EQ(s.created_generation, 0);
  EXPECT_EQ(s.start_time, kube::FormatTime(kT0));
  EXPECT_TRUE(d.job_created);
  EXPECT_NE(FindEvent(d, "CreatedPods"), nullptr);
  // The pods it creates count as active at once (one status write, not two); pending pods
  // are watched, not polled.
  EXPECT_EQ(s.replica_statuses["Worker"], (api::ReplicaStatus{2, 0, 0}));
  EXPECT_EQ(s.replica_statuses["Evaluator"], (api::ReplicaStatus{1, 0, 0}));
  EXPECT_FALSE(d.requeue_after);
}

// spec.managedBy naming another controller: the job is that controller's. Nothing is created
// or deleted, no event, no status, no requeue, whatever state the job is in.
TEST(Reconcile, AJobManagedByAnotherControllerIsLeftAlone) {
  World w;
  w.in.job["spec"]["managedBy"] = "example.com/other";
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(d.actions.empty());
  EXPECT_FALSE(d.status);
  EXPECT_FALSE(d.requeue_after);
  EXPECT_FALSE(d.job_created);
  // Running pods that fail, a spec the operator would refuse, a malformed status: still not
  // this operator's to restart, fail or repair.
  w.Running();
  w.in.job["spec"]["managedBy"] = "example.com/other";
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 1);
  w.in.job["spec"]["replicaSpecs"]["PS"] = {{"replicas", 1}};
  w.in.job["status"]["conditions"] = "not a list";
  d = Reconcile(w.in);
  EXPECT_TRUE(d.actions.empty());
  EXPECT_FALSE(d.status);
  // A value of another type (which the CRD refuses) names no controller this operator is.
  w.in.job["spec"]["managedBy"] = 5;
  EXPECT_TRUE(Reconcile(w.in).actions.empty());
}

// This operator's own name, an empty value or none: the operator runs the job.
TEST(Reconcile, AJobManagedByThisOperatorRuns) {
  for (const json& managed_by : {json(api::kControllerName), json(""), json()}) {
    World w;
    w.in.job["spec"]["managedBy"] = managed_by;
    Decision d = Reconcile(w.in);
    EXPECT_EQ(Created(d).size(), 5u) << managed_by;
    EXPECT_TRUE(StatusOf(d).IsTrue("Created")) << managed_by;
  }
  EXPECT_EQ(std::string(api::kControllerName), "tjo.dev/tj-operator");
}

TEST(Reconcile, IdempotentOncePodsExist) {
  World w;
  Decision d1 = Reconcile(w.in);
  w.Keep(d1);
  w.in.service = json::object();
  for (const auto& a : d1.actions) {
    if (a.kind == Action::Kind::kCreate && a.resource.plural == "pods") {
      json p = ObjectOf(a);
      p["status"] = {{"phase", "Pending"}};
      w.in.pods.push_back(p);
    }
  }
  Decision d2 = Reconcile(w.in);
  EXPECT_TRUE(Created(d2).empty());
  EXPECT_TRUE(Deleted(d2).empty());
  EXPECT_FALSE(d2.job_created);
}

TEST(Reconcile, AllRunningSetsRunning) {
  World w;
  w.Running();
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(Created(d).empty());
  EXPECT_TRUE(Deleted(d).empty());
  EXPECT_EQ(Cond(d, "Running").status, "True");
  EXPECT_EQ(Cond(d, "Running").reason, "JobRunning");
  EXPECT_NE(FindEvent(d, "JobRunning"), nullptr);
  EXPECT_EQ(StatusOf(d).replica_statuses["Worker"], (api::ReplicaStatus{2, 0, 0}));
  EXPECT_EQ(StatusOf(d).replica_statuses["Evaluator"], (api::ReplicaStatus{1, 0, 0}));
  EXPECT_EQ(d.requeue_after, milliseconds(seconds(5)));
  w.Keep(d);
  Decision d2 = Reconcile(w.in);
  EXPECT_FALSE(d2.status) << d2.status->dump();
  EXPECT_EQ(FindEvent(d2, "JobRunning"), nullptr);
}

TEST(Reconcile, WithoutEvaluatorChiefSuccessIsJobSuccess) {
  World w;
  w.in.job = Job(2, false);
  w.Running();
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Succeeded", 0);
  EXPECT_TRUE(StatusOf(Reconcile(w.in)).IsTrue("Succeeded"));
}

TEST(Reconcile, AllWorkersPolicyWaitsForEveryWorker) {
  World w;
  w.in.job = Job(2, false);
  w.in.job["spec"]["successPolicy"] = "AllWorkers";
  w.Running();
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Succeeded", 0);
  EXPECT_FALSE(StatusOf(Reconcile(w.in)).Finished());
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Succeeded", 0);
  EXPECT_TRUE(StatusOf(Reconcile(w.in)).IsTrue("Succeeded"));
}

TEST(Reconcile, ChiefDecidesSuccessWhenPresent) {
  World w;
  w.in.job = Job(2, false);
  w.in.job["spec"]["replicaSpecs"]["Chief"] = {{"replicas", 1}, {"template", Template()}};
  w.Running();
  w.in.pods.push_back(Pod(w.in.job, ReplicaType::kChief, 0, 0, "Running"));
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Succeeded", 0);
  EXPECT_FALSE(StatusOf(Reconcile(w.in)).Finished());  // worker 0 is not the chief here
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kChief, 0, 0, "Succeeded", 0);
  EXPECT_TRUE(StatusOf(Reconcile(w.in)).IsTrue("Succeeded"));
}

TEST(Reconcile, ActiveDeadlineFailsOnTimeAndRequeuesForIt) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 100}};
  w.Running();
  w.in.now = kT0 + seconds(40);
  Decision d1 = Reconcile(w.in);
  ASSERT_TRUE(d1.requeue_after);
  EXPECT_EQ(*d1.requeue_after, milliseconds(5000));  // the progress poll comes first
  w.in.now = kT0 + seconds(98);
  Decision d2 = Reconcile(w.in);
  EXPECT_EQ(*d2.requeue_after, milliseconds(2001));
  w.in.now = kT0 + seconds(100);
  Decision d3 = Reconcile(w.in);
  EXPECT_EQ(Cond(d3, "Failed").reason, "DeadlineExceeded");
  EXPECT_NE(Cond(d3, "Failed").message.find("activeDeadlineSeconds=100"), std::string::npos);
  EXPECT_EQ(Deleted(d3).size(), 3u);
}

// Durations a user may write (up to the API's maximum) must not wrap the clock: a deadline of
// ~70 billion years is "never", not a time in the past that fails the job at once.
TEST(Reconcile, HugeDurationsSaturateInsteadOfWrappingTheClock) {
  for (const char* field : {"activeDeadlineSeconds", "startupDeadlineSeconds"}) {
    World w;
    w.in.job["spec"]["runPolicy"] = {{field, INT64_MAX / 4}};
    w.Running();
    if (std::string(field) == "startupDeadlineSeconds") {
      w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Pending");
    }
    w.in.now = kT0 + seconds(40);
    Decision d = Reconcile(w.in);
    EXPECT_FALSE(StatusOf(d).IsTrue("Failed")) << field << ": " << Cond(d, "Failed").message;
    ASSERT_TRUE(d.requeue_after) << field;
    EXPECT_GT(*d.requeue_after, milliseconds(0)) << field;
  }
  World w;
  w.in.job["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", INT64_MAX / 4}};
  w.in.job["status"] = {{"conditions", json::array({{{"type", "Failed"}, {"status", "True"}}})},
                        {"completionTime", kube::FormatTime(kT0)}};
  w.in.now = kT0 + seconds(60);
  Decision d = Reconcile(w.in);
  for (const Action& a : d.actions) {
    EXPECT_NE(a.kind, Action::Kind::kDeleteJob) << "a job with a ~forever TTL was deleted";
  }
}

// The secure default runAsNonRoot meets an image that runs as root (official TensorFlow
// images): the kubelet never starts it; the job fails at once saying how to opt out.
TEST(Reconcile, AnImageThatRunsAsRootFailsTheJobWithTheOptOut) {
  World w;
  w.Running();
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Pending");
  w.in.pods[1]["status"]["containerStatuses"] =
      json::array({{{"name", "trainer"},
                    {"state",
                     {{"waiting",
                       {{"reason", "CreateContainerConfigError"},
                        {"message",
                         "container has runAsNonRoot and image will run as root (pod: "
                         "\"mnist-worker-1_ns(u)\", container: trainer)"}}}}}}});
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Cond(d, "Failed").reason, "ImageRunsAsRoot");
  EXPECT_NE(Cond(d, "Failed").message.find("pod mnist-worker-1: container has runAsNonRoot"),
            std::string::npos)
      << Cond(d, "Failed").message;
  EXPECT_NE(Cond(d, "Failed").message.find("set securityContext: {runAsNonRoot: false}"),
            std::string::npos);
}

// The kubelet's message is cut to 512 bytes for the condition; a cut inside a character would
// make the status unwritable (json::dump throws on invalid UTF-8) and the job never Failed.
TEST(Reconcile, ALongKubeletMessageIsCutAtACharacterBoundary) {
  World w;
  w.Running();
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Pending");
  // 511 ASCII bytes, then two-byte characters: byte 512 is the middle of one.
  const std::string message = "container has runAsNonRoot and image will run as root " +
                              std::string(457, 'x') + "\u00e9\u00e9\u00e9\u00e9";
  ASSERT_EQ(message.size(), 511u + 8u);
  w.in.pods[1]["status"]["containerStatuses"] = json::array(
      {{{"name", "trainer"},
        {"state",
         {{"waiting", {{"reason", "CreateContainerConfigError"}, {"message", message}}}}}}});
  Decision d = Reconcile(w.in);
  const std::string failed = Cond(d, "Failed").message;
  ASSERT_NE(failed.find(std::string(457, 'x')), std::string::npos) << failed;
  EXPECT_EQ(failed.find("\u00e9"), std::string::npos) << "the cut character is gone";
  EXPECT_NO_THROW((void)json(failed).dump());
}

TEST(Reconcile, StartupDeadlineNamesThePendingPod) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"startupDeadlineSeconds", 30}};
  w.Running();
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Pending");
  w.in.pods[1]["status"]["containerStatuses"] = json::array(
      {{{"name", "trainer"}, {"state", {{"waiting", {{"reason", "ImagePullBackOff"}}}}}}});
  w.in.now = kT0 + seconds(29);
  Decision d1 = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d1).Finished());
  EXPECT_EQ(*d1.requeue_after, milliseconds(1001));
  w.in.now = kT0 + seconds(30);
  Decision d2 = Reconcile(w.in);
  EXPECT_EQ(Cond(d2, "Failed").reason, "StartupDeadlineExceeded");
  EXPECT_NE(Cond(d2, "Failed").message.find("mnist-worker-1"), std::string::npos);
  EXPECT_NE(Cond(d2, "Failed").message.find("ImagePullBackOff"), std::string::npos);
}

struct CleanCase {
  std::string policy;
  std::vector<std::string> deleted;
};
class CleanPodPolicyTest : public ::testing::TestWithParam<CleanCase> {};
TEST_P(CleanPodPolicyTest, AppliesOnceFinished) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"cleanPodPolicy", GetParam().policy}};
  w.Running();
  w.in.job["status"]["conditions"].push_back({{"type", "Succeeded"}, {"status", "True"}});
  w.in.job["status"]["completionTime"] = kube::FormatTime(kT0);
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Succeeded", 0);
  w.in.job["status"]["replicaStatuses"] = {{"Worker", {{"active", 1}, {"succeeded", 1}}}};
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Deleted(d), GetParam().deleted);
  EXPECT_TRUE(Created(d).empty());
  EXPECT_FALSE(d.requeue_after);
  EXPECT_FALSE(d.status);  // replicaStatuses frozen at the end
}
INSTANTIATE_TEST_SUITE_P(
    Policies, CleanPodPolicyTest,
    ::testing::Values(CleanCase{"All", {"mnist-worker-0", "mnist-worker-1", "mnist-evaluator-0"}},
                      CleanCase{"Running", {"mnist-worker-1", "mnist-evaluator-0"}},
                      CleanCase{"None", {}}));

TEST(Reconcile, TtlDeletesTheJobOnTime) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", 60}};
  w.in.job["status"] = {{"conditions", json::array({{{"type", "Failed"}, {"status", "True"}}})},
                        {"completionTime", kube::FormatTime(kT0)}};
  w.in.now = kT0 + seconds(45);
  Decision d1 = Reconcile(w.in);
  EXPECT_EQ(*d1.requeue_after, milliseconds(15001));
  w.in.now = kT0 + seconds(60);
  Decision d2 = Reconcile(w.in);
  ASSERT_EQ(d2.actions.size(), 1u);
  EXPECT_EQ(d2.actions[0].kind, Action::Kind::kDeleteJob);
  EXPECT_EQ(d2.actions[0].name, "mnist");
}

TEST(Reconcile, SuspendDeletesPodsAndResumeRecreatesThem) {
  World w;
  w.Running();
  w.in.job["spec"]["runPolicy"] = {{"suspend", true}};
  Decision d1 = Reconcile(w.in);
  EXPECT_EQ(Deleted(d1).size(), 3u);
  EXPECT_EQ(Cond(d1, "Suspended").status, "True");
  EXPECT_NE(Cond(d1, "Running").status, "True");
  EXPECT_EQ(StatusOf(d1).state, "Suspended");
  EXPECT_NE(FindEvent(d1, "JobSuspended"), nullptr);
  EXPECT_FALSE(StatusOf(d1).start_time);
  w.Keep(d1);
  w.in.pods.clear();
  Decision d2 = Reconcile(w.in);
  EXPECT_TRUE(Created(d2).empty());
  EXPECT_EQ(FindEvent(d2, "JobSuspended"), nullptr);  // said once
  w.Keep(d2);

  w.in.job["spec"]["runPolicy"]["suspend"] = false;
  w.in.now = kT0 + seconds(100);
  Decision d3 = Reconcile(w.in);
  EXPECT_EQ(Cond(d3, "Suspended").status, "False");
  EXPECT_EQ(Cond(d3, "Suspended").reason, "JobResumed");
  EXPECT_EQ(Created(d3).size(), 3u);
  EXPECT_FALSE(d3.job_restarted);  // the missing pods are not "deleted" failures
  EXPECT_EQ(StatusOf(d3).start_time, kube::FormatTime(w.in.now));
}

TEST(Reconcile, InvalidSpecFailsOnceWithTheField) {
  World w;
  w.in.job["spec"]["replicaSpecs"]["Worker"]["replicas"] = -1;
  Decision d1 = Reconcile(w.in);
  EXPECT_EQ(Cond(d1, "Failed").reason, "InvalidSpec");
  EXPECT_NE(Cond(d1, "Failed").message.find("spec.replicaSpecs.Worker.replicas: must be >= 1"),
            std::string::npos);
  EXPECT_TRUE(Created(d1).empty());
  ASSERT_NE(FindEvent(d1, "InvalidSpec"), nullptr);
  w.Keep(d1);
  Decision d2 = Reconcile(w.in);
  EXPECT_FALSE(d2.status);
  EXPECT_EQ(FindEvent(d2, "InvalidSpec"), nullptr);
}

TEST(Reconcile, GarbageNeverCrashes) {
  for (const json& spec : {json(nullptr), json(3), json("x"), json::array(),
                           json{{"replicaSpecs", {{"Worker", nullptr}}}},
                           json{{"replicaSpecs", {{"Worker", {{"template", {{"spec", 3}}}}}}}}}) {
    World w;
    w.in.job["spec"] = spec;
    Decision d = Reconcile(w.in);
    EXPECT_EQ(Cond(d, "Failed").reason, "InvalidSpec") << spec.dump();
  }
  World w;
  w.Running();
  w.in.pods[0]["metadata"]["labels"]["tjo.dev/replica-index"] = "not-a-number";
  w.in.pods[1]["status"] = "garbage";
  Decision d = Reconcile(w.in);  // must not throw
  (void)d;
}

TEST(Reconcile, ForeignPodsAreIgnoredAndDeletingJobsLeftAlone) {
  World w;
  w.Running();
  json foreign = w.in.pods[0];
  foreign["metadata"]["ownerReferences"][0]["uid"] = "someone-else";
  foreign["metadata"]["name"] = "mnist-worker-7";
  foreign["status"]["phase"] = "Failed";
  w.in.pods.push_back(foreign);
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(Deleted(d).empty());
  EXPECT_FALSE(d.job_restarted);

  w.in.job["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  EXPECT_TRUE(Reconcile(w.in).actions.empty());
}

// API conventions: status.observedGeneration and each condition's observedGeneration say which
// spec they were computed from, so `kubectl wait` and tools can tell a stale status.
TEST(Reconcile, StatusAndConditionsCarryTheObservedGeneration) {
  World w;
  w.in.job["metadata"]["generation"] = 3;
  w.Running();
  Decision d = Reconcile(w.in);
  ASSERT_TRUE(d.status);
  EXPECT_EQ((*d.status)["observedGeneration"], 3);
  for (const json& c : (*d.status)["conditions"]) {
    EXPECT_EQ(c["observedGeneration"], 3) << c.dump();
  }
  w.Keep(d);
  w.in.job["metadata"]["generation"] = 4;  // a new spec, same state
  Decision d2 = Reconcile(w.in);
  ASSERT_TRUE(d2.status);
  EXPECT_EQ((*d2.status)["observedGeneration"], 4);
  EXPECT_EQ(Cond(d2, "Running").status, "True");
}

TEST(Reconcile, ANameThatMakesAnInvalidHostnameFailsTheJob) {
  World w;
  w.in.job["metadata"]["name"] = std::string(56, 'm');  // + "-evaluator-0": 68
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Cond(d, "Failed").reason, "InvalidSpec");
  EXPECT_NE(Cond(d, "Failed").message.find("hostnames take at most 63"), std::string::npos)
      << Cond(d, "Failed").message;
  EXPECT_TRUE(Created(d).empty());
}

}  // namespace
}  // namespace tj::controller
