// The reconciler, rule by rule: observed state and time in, actions, status and requeue out.
// No API server: jobs and pods are JSON as the API server would return them.
#include "operator/controller/reconciler.h"

#include <gtest/gtest.h>

#include <functional>
#include <regex>

#include "common/status_schema.h"
#include "operator/controller/executor.h"
#include "operator/controller/job_resources.h"
#include "tests/support/subprocess.h"
#include "trainer/observe/status_server.h"
#include "trainer/train/progress.h"

namespace tj::controller {
namespace {

using api::ReplicaType;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

const kube::WallTime kT0 = kube::WallTime(seconds(1700000000));

json Template() {
  return {{"spec",
           {{"containers", json::array({{{"name", "trainer"},
                                         {"image", "tj-trainer"},
                                         {"args", json::array({"--epochs", "2"})}}})}}}};
}

json Job(int workers = 2, bool evaluator = true) {
  json j = {{"apiVersion", "tjo.dev/v1alpha1"},
            {"kind", "TrainingJob"},
            {"metadata", {{"name", "mnist"}, {"namespace", "ns"}, {"uid", "uid-1"}}},
            {"spec",
             {{"replicaSpecs", {{"Worker", {{"replicas", workers}, {"template", Template()}}}}}}}};
  if (evaluator)
    j["spec"]["replicaSpecs"]["Evaluator"] = {{"replicas", 1}, {"template", Template()}};
  return j;
}

// A pod as the operator would have created it, in `phase`.
json Pod(const json& job, ReplicaType t, int i, int gen, const std::string& phase,
         std::optional<int> exit_code = std::nullopt) {
  auto spec = api::ParseSpec(job["spec"]);
  json p = BuildPod(job, *spec, t, i, gen);
  p["metadata"]["creationTimestamp"] = kube::FormatTime(kT0);
  p["status"] = {{"phase", phase}, {"podIP", "127.0.1." + std::to_string(i + 1)}};
  if (exit_code) {
    p["status"]["containerStatuses"] =
        json::array({{{"name", "trainer"},
                      {"state",
                       {{"terminated",
                         {{"exitCode", *exit_code},
                          {"reason", *exit_code == 0 ? "Completed" : "Error"},
                          {"finishedAt", kube::FormatTime(kT0)}}}}}}});
  }
  return p;
}

// A job whose whole gang (generation `gen`) and evaluator run, with status to match.
struct World {
  json job = Job();
  Observed in;
  World() {
    in.job = job;
    in.now = kT0;
    in.new_rendezvous_key = "k";
  }
  void Running(int gen = 0) {
    json st = {{"restartCount", gen},
               {"createdGeneration", gen},
               {"rendezvousKeyHash", KeyHash("k")},
               {"startTime", kube::FormatTime(kT0)},
               {"conditions", json::array({{{"type", "Created"},
                                            {"status", "True"},
                                            {"reason", "JobCreated"},
                                            {"message", "created"},
                                            {"lastTransitionTime", kube::FormatTime(kT0)}}})}};
    in.job["status"] = st;
    in.service = json::object();
    in.pods = {Pod(in.job, ReplicaType::kWorker, 0, gen, "Running"),
               Pod(in.job, ReplicaType::kWorker, 1, gen, "Running")};
    if (in.job["spec"]["replicaSpecs"].contains("Evaluator")) {
      in.pods.push_back(Pod(in.job, ReplicaType::kEvaluator, 0, 0, "Running"));
    }
  }
  // Applies a decision's status to the job, as the executor would.
  void Keep(const Decision& d) {
    if (d.status) in.job["status"] = *d.status;
  }
};

std::vector<std::string> Created(const Decision& d) {
  std::vector<std::string> out;
  for (const auto& a : d.actions) {
    if (a.kind == Action::Kind::kCreate) out.push_back(a.resource.plural + "/" + a.name);
  }
  return out;
}
std::vector<std::string> Deleted(const Decision& d) {
  std::vector<std::string> out;
  for (const auto& a : d.actions) {
    if (a.kind == Action::Kind::kDelete) out.push_back(a.name);
  }
  return out;
}
const Action* FindEvent(const Decision& d, const std::string& reason) {
  for (const auto& a : d.actions) {
    if (a.kind == Action::Kind::kEvent && a.reason == reason) return &a;
  }
  return nullptr;
}
// Kubernetes' API conventions for conditions, checked on every status a test reads: a CamelCase
// reason (metav1.Condition's pattern), True or False, and the time of the last transition.
void ExpectConventionalConditions(const json& status) {
  if (!status.contains("conditions")) return;
  static const std::regex kCamelCase("^[A-Z][A-Za-z0-9]*$");
  for (const json& c : status["conditions"]) {
    EXPECT_TRUE(std::regex_match(c.value("reason", ""), kCamelCase)) << c.dump();
    EXPECT_TRUE(c["status"] == "True" || c["status"] == "False") << c.dump();
    EXPECT_TRUE(c.contains("lastTransitionTime")) << c.dump();
    EXPECT_TRUE(c.contains("message")) << c.dump();
  }
}
api::TrainingJobStatus StatusOf(const Decision& d) {
  if (d.status) ExpectConventionalConditions(*d.status);
  return api::TrainingJobStatus::FromJson(d.status.value_or(json::object()));
}
const api::Condition& Cond(const Decision& d, const std::string& type) {
  static api::Condition none;
  static thread_local api::TrainingJobStatus s;
  s = StatusOf(d);
  const api::Condition* c = s.Find(type);
  return c ? *c : none;
}

TEST(Reconcile, NewJobCreatesServiceSecretAndEveryPod) {
  World w;
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Created(d), (std::vector<std::string>{"services/mnist", "secrets/mnist-rendezvous",
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

TEST(Reconcile, PartialCreationIsCompletedNotRestarted) {
  World w;
  w.in.service = json::object();
  w.in.job["status"] = {
      {"restartCount", 0}, {"createdGeneration", -1}, {"rendezvousKeyHash", KeyHash("k")}};
  w.in.pods = {Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Pending")};
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Created(d),
            (std::vector<std::string>{"pods/mnist-worker-1", "pods/mnist-evaluator-0"}));
  EXPECT_FALSE(d.job_restarted);
}

TEST(Reconcile, AWholeGangCountsAsCreatedThoughTheStatusNeverSaidSo) {
  World w;
  w.Running();
  w.in.job["status"]["createdGeneration"] = -1;  // its creator's status write never came
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(Created(d).empty());
  EXPECT_EQ(StatusOf(d).created_generation, 0);
  // So a pod that then disappears restarts the gang instead of being created again alone.
  w.Keep(d);
  w.in.pods.erase(w.in.pods.begin() + 1);
  Decision d2 = Reconcile(w.in);
  EXPECT_TRUE(Created(d2).empty()) << ::testing::PrintToString(Created(d2));
  EXPECT_TRUE(d2.job_restarted);
  EXPECT_EQ(StatusOf(d2).restart_count, 1);
}

TEST(Pods, NamesLabelsEnvAndOwner) {
  json job = Job();
  auto spec = api::ParseSpec(job["spec"]);
  json p = BuildPod(job, *spec, ReplicaType::kWorker, 1, 3);
  EXPECT_EQ(p["metadata"]["name"], "mnist-worker-1");
  EXPECT_EQ(p["metadata"]["labels"]["tjo.dev/job-name"], "mnist");
  EXPECT_EQ(p["metadata"]["labels"]["tjo.dev/replica-type"], "worker");
  EXPECT_EQ(p["metadata"]["labels"]["tjo.dev/replica-index"], "1");
  EXPECT_EQ(p["metadata"]["labels"]["tjo.dev/restart-count"], "3");
  EXPECT_EQ(p["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(p["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(p["spec"]["hostname"], "mnist-worker-1");
  EXPECT_EQ(p["spec"]["subdomain"], "mnist");
  EXPECT_EQ(p["spec"]["restartPolicy"], "Never");
  const json& c = p["spec"]["containers"][0];
  std::map<std::string, json> env;
  for (const auto& e : c["env"]) env[e["name"]] = e;
  json tf = json::parse(env["TF_CONFIG"]["value"].get<std::string>());
  EXPECT_EQ(tf["task"]["type"], "worker");
  EXPECT_EQ(tf["task"]["index"], 1);
  EXPECT_EQ(tf["environment"], "cloud");
  EXPECT_EQ(tf["cluster"]["worker"][1], "mnist-worker-1.mnist.ns.svc:2222");
  EXPECT_EQ(tf["cluster"]["evaluator"][0], "mnist-evaluator-0.mnist.ns.svc:2222");
  EXPECT_FALSE(tf["cluster"].contains("chief"));
  EXPECT_EQ(env["TJ_JOB_NAME"]["value"], "mnist");
  EXPECT_EQ(env["TJ_RESTART_COUNT"]["value"], "3");
  EXPECT_EQ(env["TJ_JOB_UID"]["value"], "uid-1");  // the backups' scope
  EXPECT_EQ(env["TJ_RENDEZVOUS_KEY"]["valueFrom"]["secretKeyRef"]["name"], "mnist-rendezvous");
  EXPECT_EQ(c["args"], json::array({"--epochs", "2"}));  // the args as written
  EXPECT_EQ(env["TJ_STATUS_PORT"]["value"], "8471");
  EXPECT_EQ(StatusPortOf(p), 8471);
  // Prometheus' pod discovery (the chart's PodMonitor) finds /metrics by this annotation.
  EXPECT_EQ(p["metadata"]["annotations"]["tjo.dev/status-port"], "8471");
  EXPECT_EQ(StatusPortOf(BuildPod(job, *spec, ReplicaType::kWorker, 0, 0)), 8470);
  EXPECT_EQ(StatusPortOf(BuildPod(job, *spec, ReplicaType::kEvaluator, 0, 0)), 8472);
}

TEST(Pods, KeepsUserStatusPortAndPicksTrainerContainer) {
  json job = Job();
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] =
      json::array({{{"name", "sidecar"}, {"image", "busybox"}},
                   {{"name", "trainer"},
                    {"image", "x/tj-trainer"},
                    {"args", {"--status-port=9000"}},
                    {"env", json::array({{{"name", "TF_CONFIG"}, {"value", "user"}}})}}});
  job["spec"]["port"] = 3333;
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  json p = BuildPod(job, *spec, ReplicaType::kWorker, 0, 0);
  EXPECT_FALSE(p["spec"]["containers"][0].contains("env"));
  const json& c = p["spec"]["containers"][1];
  EXPECT_EQ(c["args"], json::array({"--status-port=9000"}));
  EXPECT_EQ(StatusPortOf(p), 9000);
  EXPECT_EQ(p["metadata"]["annotations"]["tjo.dev/status-port"], "9000");
  for (const auto& e : c["env"]) EXPECT_NE(e["name"], "TJ_STATUS_PORT");
  int tf_configs = 0;
  for (const auto& e : c["env"]) {
    if (e["name"] == "TF_CONFIG") {
      ++tf_configs;
      EXPECT_NE(e["value"].get<std::string>().find(":3333"), std::string::npos);
    }
  }
  EXPECT_EQ(tf_configs, 1);
}

// A TFJob user's template: the container named "tensorflow" gets TF_CONFIG and the status port
// by env only (a strict argument parser sees its args as written); a container port named
// "tfjob-port" is the port TF_CONFIG gives for that replica type, as TFJob reads it.
TEST(Pods, TfJobContainerAndPortAndArgsUntouched) {
  json job = Job();
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] =
      json::array({{{"name", "trainer"}, {"image", "sidecar"}},
                   {{"name", "tensorflow"},
                    {"image", "user/mnist"},
                    {"command", {"python3", "/app/train.py"}},
                    {"args", {"--strict", "1"}},
                    {"ports", json::array({{{"name", "tfjob-port"}, {"containerPort", 2223}}})}}});
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(ReplicaPort(*spec, ReplicaType::kWorker), 2223);
  EXPECT_EQ(ReplicaPort(*spec, ReplicaType::kEvaluator), 2222);  // no tfjob-port: spec.port
  json p = BuildPod(job, *spec, ReplicaType::kWorker, 1, 0);
  EXPECT_FALSE(p["spec"]["containers"][0].contains("env"));
  const json& c = p["spec"]["containers"][1];
  EXPECT_EQ(c["command"], json::array({"python3", "/app/train.py"}));
  EXPECT_EQ(c["args"], json::array({"--strict", "1"}));
  std::map<std::string, json> env;
  for (const auto& e : c["env"]) env[e["name"]] = e;
  json tf = json::parse(env["TF_CONFIG"]["value"].get<std::string>());
  EXPECT_EQ(tf["cluster"]["worker"][0], "mnist-worker-0.mnist.ns.svc:2223");
  EXPECT_EQ(tf["cluster"]["evaluator"][0], "mnist-evaluator-0.mnist.ns.svc:2222");
  EXPECT_EQ(env["TJ_STATUS_PORT"]["value"], "8471");
  EXPECT_EQ(StatusPortOf(p), 8471);
  json svc = BuildService(job, *spec);
  ASSERT_EQ(svc["spec"]["ports"].size(), 2u);
  EXPECT_EQ(svc["spec"]["ports"][1]["port"], 2223);
}

TEST(Pods, StatusPortFromTemplateEnvIsKept) {
  json job = Job();
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] =
      json::array({{{"name", "TJ_STATUS_PORT"}, {"value", "0"}}});
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  json p = BuildPod(job, *spec, ReplicaType::kWorker, 0, 0);
  int n = 0;
  for (const auto& e : p["spec"]["containers"][0]["env"]) {
    if (e["name"] == "TJ_STATUS_PORT") {
      ++n;
      EXPECT_EQ(e["value"], "0");
    }
  }
  EXPECT_EQ(n, 1);
  EXPECT_EQ(StatusPortOf(p), std::nullopt);  // 0: off, nothing to poll
}

TEST(Pods, ChiefInClusterAndServiceHeadless) {
  json job = Job();
  job["spec"]["replicaSpecs"]["Chief"] = {{"replicas", 1}, {"template", Template()}};
  auto spec = api::ParseSpec(job["spec"]);
  json tf = TfConfig(api::RefOf(job), *spec, ReplicaType::kChief, 0);
  EXPECT_EQ(tf["cluster"]["chief"][0], "mnist-chief-0.mnist.ns.svc:2222");
  EXPECT_EQ(tf["cluster"]["worker"].size(), 2u);
  json svc = BuildService(job, *spec);
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["selector"]["tjo.dev/job-name"], "mnist");
  json sec = BuildSecret(job, "abc");
  EXPECT_EQ(sec["metadata"]["name"], "mnist-rendezvous");
  EXPECT_EQ(sec["stringData"]["key"], "abc");
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

// How worker 1 ends -> what happens to the job.
struct FailureCase {
  std::string name;
  std::string policy;
  std::string phase;  // Failed, or "Deleted" (gone), or "Deleting" (deletionTimestamp)
  std::optional<int> exit_code;
  std::string pod_reason;
  bool restart;  // else the job fails
  std::string message;
};

class FailureTest : public ::testing::TestWithParam<FailureCase> {};

TEST_P(FailureTest, RestartsTheGangOrFails) {
  const FailureCase& c = GetParam();
  World w;
  w.in.job["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = c.policy;
  w.Running();
  if (c.phase == "Deleted") {
    w.in.pods.erase(w.in.pods.begin() + 1);
  } else if (c.phase == "Deleting") {
    w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  } else {
    w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, c.phase, c.exit_code);
    if (!c.pod_reason.empty()) w.in.pods[1]["status"]["reason"] = c.pod_reason;
  }
  Decision d = Reconcile(w.in);
  auto s = StatusOf(d);
  if (c.restart) {
    EXPECT_EQ(s.restart_count, 1);
    EXPECT_EQ(s.created_generation, -1);
    EXPECT_EQ(Cond(d, "Restarting").status, "True");
    EXPECT_EQ(Cond(d, "Restarting").reason, "GangRestart");
    EXPECT_FALSE(s.IsTrue("Failed"));
    ASSERT_NE(FindEvent(d, "GangRestart"), nullptr);
    EXPECT_NE(FindEvent(d, "GangRestart")->message.find(c.message), std::string::npos)
        << FindEvent(d, "GangRestart")->message;
    EXPECT_EQ(FindEvent(d, "GangRestart")->event_type, "Warning");
    // Every chief/worker pod goes; the evaluator stays.
    std::vector<std::string> del = Deleted(d);
    EXPECT_NE(std::find(del.begin(), del.end(), "mnist-worker-0"), del.end());
    EXPECT_EQ(std::find(del.begin(), del.end(), "mnist-evaluator-0"), del.end());
    EXPECT_TRUE(Created(d).empty());
    EXPECT_TRUE(d.job_restarted);
  } else {
    EXPECT_TRUE(s.IsTrue("Failed"));
    EXPECT_NE(Cond(d, "Failed").message.find(c.message), std::string::npos)
        << Cond(d, "Failed").message;
    EXPECT_EQ(s.restart_count, 0);
    EXPECT_TRUE(s.completion_time);
    EXPECT_TRUE(d.job_failed);
    // cleanPodPolicy Running (default): the running pods go.
    std::vector<std::string> del = Deleted(d);
    EXPECT_NE(std::find(del.begin(), del.end(), "mnist-worker-0"), del.end());
    EXPECT_NE(std::find(del.begin(), del.end(), "mnist-evaluator-0"), del.end());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, FailureTest,
    ::testing::Values(
        FailureCase{"ExitCodeSignal", "ExitCode", "Failed", 137, "", true,
                    "exited with code 137 (signal 9)"},
        FailureCase{"ExitCodePeerLost", "ExitCode", "Failed", 75, "", true, "code 75 (peer lost)"},
        FailureCase{
            "ExitCodeOne", "ExitCode", "Failed", 1, "", false,
            "pod mnist-worker-1 exited with code 1, which restartPolicy ExitCode does not retry"},
        FailureCase{"ExitCodeUsage", "ExitCode", "Failed", 2, "", false, "code 2"},
        FailureCase{"ExitCodeDeleted", "ExitCode", "Deleted", std::nullopt, "", true,
                    "pod mnist-worker-1 was deleted"},
        FailureCase{"ExitCodeDeleting", "ExitCode", "Deleting", std::nullopt, "", true,
                    "pod mnist-worker-1 was deleted"},
        FailureCase{"ExitCodeEvicted", "ExitCode", "Failed", std::nullopt, "Evicted", true,
                    "pod mnist-worker-1 was evicted"},
        FailureCase{"ExitCodeNoStatus", "ExitCode", "Failed", std::nullopt, "", true, "failed"},
        FailureCase{"OnFailureOne", "OnFailure", "Failed", 1, "", true, "code 1"},
        FailureCase{"AlwaysOne", "Always", "Failed", 1, "", true, "code 1"},
        FailureCase{"NeverSignal", "Never", "Failed", 137, "", false, "restartPolicy Never"},
        FailureCase{"NeverOne", "Never", "Failed", 1, "", false, "code 1"},
        FailureCase{"NeverDeleted", "Never", "Deleted", std::nullopt, "", true, "was deleted"}),
    [](const ::testing::TestParamInfo<FailureCase>& i) { return i.param.name; });

TEST(Reconcile, NonRetryableFailureReasonNamesThePolicy) {
  World w;
  w.Running();
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 1);
  EXPECT_EQ(Cond(Reconcile(w.in), "Failed").reason, "NonRetryableExitCode");
  w.in.job["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = "Never";
  EXPECT_EQ(Cond(Reconcile(w.in), "Failed").reason, "PodFailed");
}

TEST(Reconcile, RestartNamesTheRootCauseNotThePeerThatLostIt) {
  World w;
  w.Running();
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Failed", 75);
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 137);
  Decision d = Reconcile(w.in);
  ASSERT_NE(FindEvent(d, "GangRestart"), nullptr);
  EXPECT_NE(FindEvent(d, "GangRestart")->message.find("mnist-worker-1 exited with code 137"),
            std::string::npos);
}

TEST(Reconcile, BackoffLimitFailsTheJob) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 2}};
  w.Running(2);
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 2, "Failed", 137);
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Cond(d, "Failed").reason, "BackoffLimitExceeded");
  EXPECT_NE(Cond(d, "Failed").message.find("restarted 2 times, 2 of them counted (backoffLimit 2)"),
            std::string::npos)
      << Cond(d, "Failed").message;
  EXPECT_EQ(StatusOf(d).restart_count, 2);
}

// The failure policy's budget, one gang restart per row: how the ended pods look, what the
// spec's rules say, and what the restart costs. Each row starts from a job restarted once
// already (counted) with backoffLimit 2.
struct BudgetCase {
  std::string name;
  json rules;                       // spec.failurePolicy.rules; null: defaults
  std::function<void(World&)> end;  // ends pods of generation 1
  std::string outcome;              // "restart" | "BackoffLimitExceeded" | "FailurePolicy"
  std::string cause;                // the byCause entry that grows
  int used_after;                   // status.restarts.backoffLimitUsed afterwards
  std::string message;              // in the GangRestart Event / Failed message
};

class BudgetTest : public ::testing::TestWithParam<BudgetCase> {};

void SigtermedGang(World& w, bool evicted_still_listed) {
  // One worker was evicted (on v1.20: a deletion); both trainers stopped after the same step
  // with the retryable code.
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Failed", 75);
  if (evicted_still_listed) {
    w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed", 75);
    w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  } else {
    w.in.pods.erase(w.in.pods.begin() + 1);
  }
}

TEST_P(BudgetTest, ChargesTheRestartAsThePolicySays) {
  const BudgetCase& c = GetParam();
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 2}};
  if (!c.rules.is_null()) w.in.job["spec"]["failurePolicy"] = {{"rules", c.rules}};
  w.Running(1);
  w.in.job["status"]["restarts"] = {
      {"total", 1}, {"backoffLimitUsed", 1}, {"byCause", {{"Failed", 1}}}};
  c.end(w);
  Decision d = Reconcile(w.in);
  auto s = StatusOf(d);
  if (c.outcome == "restart") {
    ASSERT_FALSE(s.IsTrue("Failed")) << Cond(d, "Failed").message;
    EXPECT_EQ(s.restart_count, 2);
    ASSERT_NE(FindEvent(d, "GangRestart"), nullptr);
    EXPECT_NE(FindEvent(d, "GangRestart")->message.find(c.message), std::string::npos)
        << FindEvent(d, "GangRestart")->message;
    const int before = c.cause == "Failed" ? 1 : 0;
    EXPECT_EQ(s.restarts.by_cause[c.cause], before + 1);
    EXPECT_EQ(d.status->at("restarts").at("total"), 2);
  } else {
    EXPECT_EQ(Cond(d, "Failed").reason, c.outcome);
    EXPECT_NE(Cond(d, "Failed").message.find(c.message), std::string::npos)
        << Cond(d, "Failed").message;
    EXPECT_EQ(s.restart_count, 1);
  }
  EXPECT_EQ(s.restarts.backoff_limit_used, c.used_after);
}

std::vector<BudgetCase> BudgetCases() {
  return {
      BudgetCase{"SigtermedGangEvictedPodListed", nullptr, [](World& w) { SigtermedGang(w, true); },
                 "restart", "Deleted", 1,
                 "restart 2 (Deleted, not counted against backoffLimit 2): pod "
                 "mnist-worker-1 exited with code 75 (stopped on SIGTERM) and was deleted"},
      BudgetCase{"SigtermedGangEvictedPodGone", nullptr, [](World& w) { SigtermedGang(w, false); },
                 "restart", "Deleted", 1, "pod mnist-worker-1 was deleted"},
      BudgetCase{"KubeletEviction", nullptr,
                 [](World& w) {
                   w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed");
                   w.in.pods[1]["status"]["reason"] = "Evicted";
                 },
                 "restart", "Evicted", 1, "(Evicted, not counted against backoffLimit 2)"},
      // Kubernetes 1.26+: the Eviction API leaves DisruptionTarget on the pod, so the restart
      // is an eviction, not a deletion.
      BudgetCase{"EvictionApiDisruptionTarget", nullptr,
                 [](World& w) {
                   SigtermedGang(w, true);
                   w.in.pods[1]["status"]["conditions"] =
                       json::array({{{"type", "DisruptionTarget"},
                                     {"status", "True"},
                                     {"reason", "EvictionByEvictionAPI"}}});
                 },
                 "restart", "Evicted", 1,
                 "restart 2 (Evicted, not counted against backoffLimit 2): pod "
                 "mnist-worker-1 exited with code 75 (stopped on SIGTERM) and was evicted"},
      BudgetCase{"Preemption", nullptr,
                 [](World& w) {
                   w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
                   w.in.pods[1]["status"]["conditions"] =
                       json::array({{{"type", "DisruptionTarget"},
                                     {"status", "True"},
                                     {"reason", "PreemptionByScheduler"}}});
                 },
                 "restart", "Preempted", 1, "(Preempted, not counted"},
      BudgetCase{
          "ProgramFailureCounts", nullptr,
          [](World& w) { w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed", 137); },
          "restart", "Failed", 2, "restart 2 (Failed, 2 of backoffLimit 2)"},
      BudgetCase{"PeersLostWithoutADisruptionCount", nullptr,
                 [](World& w) {
                   w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Failed", 75);
                   w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed", 75);
                 },
                 "restart", "Failed", 2, "(Failed, 2 of backoffLimit 2)"},
      BudgetCase{"AProgramFailureIsNotHiddenByAnEviction", nullptr,
                 [](World& w) {
                   w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Failed", 137);
                   w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
                 },
                 "restart", "Failed", 2, "mnist-worker-0 exited with code 137"},
      BudgetCase{"SpentBudgetStillAllowsEvictions", nullptr,
                 [](World& w) {
                   w.in.job["status"]["restarts"]["backoffLimitUsed"] = 2;
                   w.in.pods[1]["status"]["reason"] = "Evicted";
                   w.in.pods[1]["status"]["phase"] = "Failed";
                 },
                 "restart", "Evicted", 2, "not counted"},
      BudgetCase{"SpentBudgetFailsOnAProgramFailure", nullptr,
                 [](World& w) {
                   w.in.job["status"]["restarts"]["backoffLimitUsed"] = 2;
                   w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed", 137);
                 },
                 "BackoffLimitExceeded", "", 2, "2 of them counted (backoffLimit 2)"},
      BudgetCase{"RuleMakesEvictionsCount",
                 json::array({{{"action", "RestartJob"}, {"onCauses", {"Evicted", "Deleted"}}}}),
                 [](World& w) { SigtermedGang(w, true); }, "restart", "Deleted", 2,
                 "(Deleted, 2 of backoffLimit 2)"},
      BudgetCase{
          "RuleFailsOnPreemption",
          json::array(
              {{{"name", "no-preemption"}, {"action", "FailJob"}, {"onCauses", {"Preempted"}}}}),
          [](World& w) {
            w.in.pods[1]["status"]["reason"] = "Preempting";
            w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
          },
          "FailurePolicy", "", 1, "cause Preempted: no-preemption fails the job"},
      BudgetCase{
          "RuleIgnoresProgramFailures",
          json::array({{{"action", "RestartJobAndIgnoreBackoffLimit"}, {"onCauses", {"Failed"}}}}),
          [](World& w) { w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed", 137); },
          "restart", "Failed", 1, "(Failed, not counted"}};
}

INSTANTIATE_TEST_SUITE_P(Policies, BudgetTest, ::testing::ValuesIn(BudgetCases()),
                         [](const ::testing::TestParamInfo<BudgetCase>& i) {
                           return i.param.name;
                         });

TEST(Reconcile, UnderNeverPeersThatLostAnEvictedPodRestartTheGang) {
  World w;
  w.in.job["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = "Never";
  w.Running();
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Failed", 75);
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 75);
  w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  Decision d = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d).IsTrue("Failed")) << Cond(d, "Failed").message;
  EXPECT_EQ(StatusOf(d).restart_count, 1);
  // Without the disruption, the same exit 75 is a failure that Never does not retry.
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 75);
  EXPECT_EQ(Cond(Reconcile(w.in), "Failed").reason, "PodFailed");
}

TEST(Reconcile, EvictedEvaluatorDoesNotUseItsBudget) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 1}};
  w.Running();
  // The kubelet evicted it under node pressure: it was killed, and says why.
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Failed", 137);
  w.in.pods[2]["status"]["reason"] = "Evicted";
  for (int i = 0; i < 3; ++i) {
    w.in.now = kT0 + std::chrono::hours(1 + i);
    Decision d = Reconcile(w.in);
    ASSERT_NE(FindEvent(d, "EvaluatorRestart"), nullptr) << "eviction " << i;
    EXPECT_NE(FindEvent(d, "EvaluatorRestart")->message.find("Evicted, not counted"),
              std::string::npos);
    w.Keep(d);
  }
  EXPECT_EQ(
      api::TrainingJobStatus::FromJson(w.in.job["status"]).restarts.evaluator_backoff_limit_used,
      0);
  // A failure of its program does.
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Failed", 137);
  w.in.now += std::chrono::hours(1);
  Decision d = Reconcile(w.in);
  ASSERT_NE(FindEvent(d, "EvaluatorRestart"), nullptr);
  EXPECT_NE(FindEvent(d, "EvaluatorRestart")->message.find("1 of 1"), std::string::npos);
}

TEST(Reconcile, ZeroBackoffLimitFailsOnFirstRetryableFailure) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 0}};
  w.Running();
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 75);
  EXPECT_EQ(Cond(Reconcile(w.in), "Failed").reason, "BackoffLimitExceeded");
}

json WithKeyHash(json pod, const std::string& key) {
  pod["metadata"]["annotations"][kKeyHashAnnotation] = KeyHash(key);
  return pod;
}
// A pod's status while the kubelet cannot start its container for `message`.
json ConfigErrorStatus(const std::string& message) {
  return {
      {"phase", "Pending"},
      {"containerStatuses",
       json::array(
           {{{"name", "trainer"},
             {"state",
              {{"waiting", {{"reason", "CreateContainerConfigError"}, {"message", message}}}}}}})}};
}
void RecordKey(json& job, const std::string& key) {
  job["status"]["rendezvousKeyHash"] = KeyHash(key);
}

TEST(Reconcile, PodsCarryTheHashOfTheKeyTheyRead) {
  World w;  // a new job: the Secret is created with the new key in the same pass as the pods
  Decision d = Reconcile(w.in);
  for (const auto& a : d.actions) {
    if (a.kind != Action::Kind::kCreate || a.resource.plural == "services") continue;
    EXPECT_EQ(KeyHashOf(ObjectOf(a)), KeyHash("k")) << a.name;
  }
  EXPECT_EQ(StatusOf(d).rendezvous_key_hash, KeyHash("k"));  // what the operator knows of it
  EXPECT_EQ(KeyHash("k").rfind("sha256:", 0), 0u);
  EXPECT_EQ(KeyHash("k").size(), 7u + 16u);
  EXPECT_NE(KeyHash("k"), KeyHash("l"));
  // The Secret was made by an earlier pass (the status says so): it is not made again, and
  // pods created later read its key, whatever key this pass drew.
  World later;
  RecordKey(later.in.job, "old");
  later.in.service = json::object();
  Decision d2 = Reconcile(later.in);
  for (const auto& a : d2.actions) {
    if (a.kind != Action::Kind::kCreate) continue;
    EXPECT_EQ(a.resource.plural, "pods");
    EXPECT_EQ(KeyHashOf(ObjectOf(a)), KeyHash("old")) << a.name;
  }
}

// The Secret is deleted mid-job. The operator does not watch Secrets; a pod that the kubelet
// cannot start without it says so. The Secret is made again with a new key; pods that run
// hold the old key, pods started from now on read the new one: the whole gang restarts, even
// with backoffLimit 0 (a new key is not the job's failure), and the new gang reads one key.
TEST(Reconcile, ASecretDeletedMidJobIsMadeAgainAndTheWholeGangRestarts) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 0}};
  w.Running();
  RecordKey(w.in.job, "old");
  for (auto& p : w.in.pods) p = WithKeyHash(p, "old");
  w.in.pods[1]["status"] = ConfigErrorStatus("secret \"mnist-rendezvous\" not found");
  w.in.new_rendezvous_key = "new";
  Decision d1 = Reconcile(w.in);
  EXPECT_EQ(Created(d1), (std::vector<std::string>{"secrets/mnist-rendezvous"}));
  EXPECT_EQ(StatusOf(d1).rendezvous_key_hash, KeyHash("new"));
  ASSERT_NE(FindEvent(d1, "RendezvousSecretMissing"), nullptr);
  EXPECT_NE(FindEvent(d1, "RendezvousSecretMissing")->message.find("mnist-worker-1"),
            std::string::npos);
  EXPECT_EQ(Deleted(d1), (std::vector<std::string>{"mnist-worker-0", "mnist-worker-1"}));
  EXPECT_TRUE(d1.job_restarted);
  EXPECT_FALSE(StatusOf(d1).IsTrue("Failed"));
  EXPECT_EQ(StatusOf(d1).restart_count, 1);
  ASSERT_NE(FindEvent(d1, "GangRestart"), nullptr);
  EXPECT_NE(FindEvent(d1, "GangRestart")->message.find("rendezvous key"), std::string::npos)
      << FindEvent(d1, "GangRestart")->message;
  w.Keep(d1);

  // Old gang gone, backoff over: the new gang carries the new key's hash; no second Secret.
  w.in.pods = {w.in.pods[2]};
  w.in.now = kT0 + seconds(2);
  w.in.new_rendezvous_key = "newer";
  Decision d2 = Reconcile(w.in);
  EXPECT_EQ(Created(d2), (std::vector<std::string>{"pods/mnist-worker-0", "pods/mnist-worker-1"}));
  for (const auto& a : d2.actions) {
    if (a.kind != Action::Kind::kCreate) continue;
    EXPECT_EQ(KeyHashOf(ObjectOf(a)), KeyHash("new"));
  }
  w.Keep(d2);
  w.in.pods = {WithKeyHash(Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Running"), "new"),
               WithKeyHash(Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Running"), "new"),
               w.in.pods[0]};
  Decision d3 = Reconcile(w.in);
  EXPECT_TRUE(Deleted(d3).empty());
  EXPECT_TRUE(Created(d3).empty());
  EXPECT_EQ(Cond(d3, "Running").status, "True");
}

// The status does not record the key: an operator stopped after the pass that made the
// Secret and pods, before it wrote the status. The pods agree on a key: that is the Secret's,
// taken as it is (nothing made twice). Pods that disagree (or none) and the key is unknown:
// the Secret is made again, and pods that may hold another key restart.
TEST(Reconcile, AKeyTheStatusDoesNotRecordIsTakenFromThePodsElseReplaced) {
  World w;
  w.Running();
  w.in.job["status"].erase("rendezvousKeyHash");
  for (auto& p : w.in.pods) p = WithKeyHash(p, "lost");
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(Created(d).empty());
  EXPECT_TRUE(Deleted(d).empty());
  EXPECT_EQ(StatusOf(d).rendezvous_key_hash, KeyHash("lost"));

  w.in.pods[1] = WithKeyHash(w.in.pods[1], "other");
  Decision d2 = Reconcile(w.in);
  EXPECT_EQ(Created(d2), (std::vector<std::string>{"secrets/mnist-rendezvous"}));
  EXPECT_EQ(Deleted(d2), (std::vector<std::string>{"mnist-worker-0", "mnist-worker-1"}));
  EXPECT_EQ(StatusOf(d2).rendezvous_key_hash, KeyHash("k"));
}

TEST(Reconcile, OneKeyOrAPodWithoutAHashRestartsNothing) {
  World w;
  w.Running();
  RecordKey(w.in.job, "k1");
  w.in.pods[0] = WithKeyHash(w.in.pods[0], "k1");
  w.in.pods[1] = WithKeyHash(Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Running"),
                             "k1");  // pods[1]: an older operator's, no hash
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(Deleted(d).empty());
  EXPECT_TRUE(Created(d).empty());
  EXPECT_FALSE(d.job_restarted);
  // A gang of which a worker finished has trained: the other, still running with the old key,
  // is not restarted for it.
  w.in.pods[0] = WithKeyHash(w.in.pods[0], "k0");
  w.in.pods[1] = WithKeyHash(Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Succeeded", 0), "k0");
  EXPECT_FALSE(Reconcile(w.in).job_restarted);
  w.in.pods[0] = WithKeyHash(w.in.pods[0], "k1");
  w.in.pods[1] = WithKeyHash(Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Running"), "k1");
  // The evaluator is not in the collective: another key does not restart the gang.
  w.in.pods[2] = WithKeyHash(w.in.pods[2], "k0");
  EXPECT_FALSE(Reconcile(w.in).job_restarted);
  // Another pod's CreateContainerConfigError (a user's ConfigMap) is not the Secret's.
  w.in.pods[2]["status"] = ConfigErrorStatus("configmap \"settings\" not found");
  EXPECT_TRUE(Created(Reconcile(w.in)).empty());
}

// Only the kubelet's words for our Secret missing make it again: a ConfigMap of the Secret's
// name (a tenant's template may ask for one), or a message that quotes the name, is not the
// Secret gone. Before, any "not found" message quoting "<job>-rendezvous" made a new key and
// restarted the gang, pass after pass while the message stayed.
TEST(Reconcile, OnlyTheSecretsOwnNotFoundMessageMakesItAgain) {
  World w;
  w.Running();
  RecordKey(w.in.job, "old");
  for (auto& p : w.in.pods) p = WithKeyHash(p, "old");
  w.in.new_rendezvous_key = "new";
  for (const char* message :
       {"configmap \"mnist-rendezvous\" not found", "configmaps \"mnist-rendezvous\" not found",
        "secret \"settings\" not found (see \"mnist-rendezvous\")",
        "secret \"mnist-rendezvous-extra\" not found"}) {
    w.in.pods[1]["status"] = ConfigErrorStatus(message);
    Decision d = Reconcile(w.in);
    EXPECT_TRUE(Created(d).empty()) << message;
    EXPECT_FALSE(d.job_restarted) << message;
    EXPECT_EQ(FindEvent(d, "RendezvousSecretMissing"), nullptr) << message;
  }
  // The kubelet's and the API server's words for it are.
  for (const char* message : {"secret \"mnist-rendezvous\" not found",
                              "container tj, env TJ_RENDEZVOUS_KEY: secrets \"mnist-rendezvous\" "
                              "not found"}) {
    w.in.pods[1]["status"] = ConfigErrorStatus(message);
    EXPECT_EQ(Created(Reconcile(w.in)), (std::vector<std::string>{"secrets/mnist-rendezvous"}))
        << message;
  }
}

TEST(Reconcile, GangRestartWaitsForOldPodsThenBackoffThenRecreates) {
  World w;
  w.Running();
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 137);
  Decision d1 = Reconcile(w.in);
  ASSERT_EQ(StatusOf(d1).restart_count, 1);
  w.Keep(d1);

  // Old pods still terminating: they are deleted (again, idempotent), nothing is created.
  w.in.now = kT0 + seconds(5);
  Decision d2 = Reconcile(w.in);
  EXPECT_TRUE(Created(d2).empty());
  EXPECT_EQ(Deleted(d2), (std::vector<std::string>{"mnist-worker-0", "mnist-worker-1"}));
  EXPECT_FALSE(d2.job_restarted);  // no second restart for the same failure
  w.Keep(d2);
  EXPECT_EQ(api::TrainingJobStatus::FromJson(w.in.job["status"]).restart_count, 1);

  // Old pods gone, inside the 1 s backoff: wait until it ends.
  w.in.pods = {w.in.pods[2]};
  w.in.now = kT0 + milliseconds(400);
  Decision d3 = Reconcile(w.in);
  EXPECT_TRUE(Created(d3).empty());
  ASSERT_TRUE(d3.requeue_after);
  EXPECT_LE(*d3.requeue_after, milliseconds(601));
  EXPECT_GE(*d3.requeue_after, milliseconds(600));

  // Backoff over: the new gang, generation 1.
  w.in.now = kT0 + seconds(2);
  Decision d4 = Reconcile(w.in);
  EXPECT_EQ(Created(d4), (std::vector<std::string>{"pods/mnist-worker-0", "pods/mnist-worker-1"}));
  for (const auto& a : d4.actions) {
    if (a.kind != Action::Kind::kCreate) continue;
    EXPECT_EQ(ObjectOf(a)["metadata"]["labels"]["tjo.dev/restart-count"], "1");
  }
  EXPECT_EQ(StatusOf(d4).created_generation, 1);
  EXPECT_NE(FindEvent(d4, "CreatedPods")->message.find("(restart 1)"), std::string::npos);
  w.Keep(d4);

  // They run: Restarting ends, Running again.
  w.in.pods = {Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Running"),
               Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Running"), w.in.pods[0]};
  Decision d5 = Reconcile(w.in);
  EXPECT_EQ(Cond(d5, "Running").status, "True");
  EXPECT_EQ(Cond(d5, "Restarting").status, "False");
  EXPECT_EQ(StatusOf(d5).restart_count, 1);
}

struct BackoffCase {
  int restart;
  int expect_ms;
};
class BackoffTest : public ::testing::TestWithParam<BackoffCase> {};
TEST_P(BackoffTest, DoublesUpToTheMax) {
  World w;
  w.Running(GetParam().restart);
  w.in.job["status"]["createdGeneration"] = -1;
  w.in.job["status"]["conditions"].push_back({{"type", "Restarting"},
                                              {"status", "True"},
                                              {"reason", "GangRestart"},
                                              {"lastTransitionTime", kube::FormatTime(kT0)},
                                              {"lastUpdateTime", kube::FormatTime(kT0)}});
  w.in.pods = {w.in.pods[2]};
  ReconcilerOptions o;
  o.restart_backoff_max = seconds(10);
  o.progress_poll = std::chrono::hours(1);
  Decision d = Reconcile(w.in, o);
  EXPECT_TRUE(Created(d).empty());
  ASSERT_TRUE(d.requeue_after);
  EXPECT_EQ(d.requeue_after->count(), GetParam().expect_ms + 1);
}
INSTANTIATE_TEST_SUITE_P(Exponential, BackoffTest,
                         ::testing::Values(BackoffCase{1, 1000}, BackoffCase{2, 2000},
                                           BackoffCase{3, 4000}, BackoffCase{4, 8000},
                                           BackoffCase{5, 10000}, BackoffCase{9, 10000}));

TEST(Reconcile, SuccessWaitsForTheEvaluatorThenSucceeds) {
  World w;
  w.Running();
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Succeeded", 0);
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Succeeded", 0);
  w.in.now = kT0 + seconds(10);
  Decision d1 = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d1).Finished());
  EXPECT_EQ(Cond(d1, "Running").reason, "WaitingForEvaluator");
  EXPECT_TRUE(Deleted(d1).empty());  // the evaluator is not killed
  ASSERT_TRUE(d1.requeue_after);
  w.Keep(d1);

  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Succeeded", 0);
  w.in.final_evaluation["mnist-evaluator-0"] = {{"event", "evaluation"},
                                                {"checkpoint", "ckpt-final"},
                                                {"epoch", 2},
                                                {"loss", 0.3},
                                                {"accuracy", 0.9}};
  Decision d2 = Reconcile(w.in);
  auto s = StatusOf(d2);
  EXPECT_TRUE(s.IsTrue("Succeeded"));
  EXPECT_EQ(Cond(d2, "Succeeded").reason, "JobSucceeded");
  EXPECT_EQ(Cond(d2, "Running").status, "False");
  EXPECT_EQ(s.evaluation["checkpoint"], "ckpt-final");
  EXPECT_EQ(s.evaluation["accuracy"], 0.9);
  EXPECT_FALSE(s.evaluation.contains("event"));
  EXPECT_EQ(s.completion_time, kube::FormatTime(w.in.now));
  EXPECT_NE(FindEvent(d2, "JobSucceeded")->message.find("0.9"), std::string::npos);
  EXPECT_TRUE(d2.job_succeeded);
  EXPECT_EQ(s.state, "Succeeded");
}

TEST(Reconcile, EvaluatorGraceIsBounded) {
  World w;
  w.Running();
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Succeeded", 0);
  ReconcilerOptions o;
  o.evaluator_grace = seconds(60);
  w.in.now = kT0 + seconds(61);
  Decision d = Reconcile(w.in, o);
  EXPECT_TRUE(StatusOf(d).IsTrue("Succeeded"));
  EXPECT_NE(Cond(d, "Succeeded").message.find("did not finish within 60s"), std::string::npos);
  // cleanPodPolicy Running: the evaluator and worker 1 are still running, so they go now.
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-worker-1", "mnist-evaluator-0"}));
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

TEST(Reconcile, EvaluatorRestartsAloneWhenRetryable) {
  World w;
  w.Running();
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Failed", 137);
  w.in.now = kT0 + seconds(1);  // its first backoff (1 s from when it ended) is over
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-evaluator-0"}));
  EXPECT_EQ(StatusOf(d).evaluator_restarts, 1);
  EXPECT_NE(FindEvent(d, "EvaluatorRestart"), nullptr);
  EXPECT_EQ(StatusOf(d).restart_count, 0);
  EXPECT_FALSE(d.job_restarted);
  // Gone: created again, alone.
  w.in.pods.pop_back();
  w.Keep(d);
  Decision d2 = Reconcile(w.in);
  EXPECT_EQ(Created(d2), (std::vector<std::string>{"pods/mnist-evaluator-0"}));
}

TEST(Reconcile, EvaluatorRestartsBackOffAndAreBounded) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 2}};
  w.Running();
  w.in.job["status"]["evaluatorRestarts"] = 1;
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Failed", 137);
  ReconcilerOptions o;
  o.progress_poll = std::chrono::hours(1);
  // Ended at kT0; the second restart waits 2 s.
  w.in.now = kT0 + seconds(1);
  Decision d1 = Reconcile(w.in, o);
  EXPECT_TRUE(Deleted(d1).empty());
  EXPECT_EQ(*d1.requeue_after, milliseconds(1001));
  w.in.now = kT0 + seconds(2);
  Decision d2 = Reconcile(w.in, o);
  EXPECT_EQ(Deleted(d2), (std::vector<std::string>{"mnist-evaluator-0"}));
  EXPECT_EQ(StatusOf(d2).evaluator_restarts, 2);
  EXPECT_NE(FindEvent(d2, "EvaluatorRestart")->message.find("(2 of 2)"), std::string::npos);
  // At the limit: left failed, said once.
  w.Keep(d2);
  Decision d3 = Reconcile(w.in, o);
  EXPECT_TRUE(Deleted(d3).empty());
  ASSERT_NE(FindEvent(d3, "EvaluatorGaveUp"), nullptr);
  w.Keep(d3);
  Decision d4 = Reconcile(w.in, o);
  EXPECT_EQ(FindEvent(d4, "EvaluatorGaveUp"), nullptr);
  EXPECT_TRUE(Deleted(d4).empty());
  EXPECT_FALSE(StatusOf(d4).Finished());
}

TEST(Reconcile, EvaluatorNonRetryableFailureLeavesTheJobRunning) {
  World w;
  w.Running();
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Failed", 1);
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(Deleted(d).empty());
  EXPECT_FALSE(StatusOf(d).Finished());
  EXPECT_EQ(StatusOf(d).replica_statuses["Evaluator"], (api::ReplicaStatus{0, 0, 1}));
  // And success then does not wait for it.
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Succeeded", 0);
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

TEST(Reconcile, StalePodsOfRemovedReplicasAreDeleted) {
  World w;
  w.Running();
  w.in.pods.push_back(Pod(Job(3), ReplicaType::kWorker, 2, 0, "Running"));
  w.in.pods.back()["metadata"]["ownerReferences"][0]["uid"] = "uid-1";
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-worker-2"}));
}

TEST(Reconcile, ProgressAndEvaluationFromTrainerStatus) {
  World w;
  w.Running();
  w.in.trainer_status["mnist-worker-0"] = {{"role", "chief"},
                                           {"state", "training"},
                                           {"epoch", 2},
                                           {"total_epochs", 3},
                                           {"step", 10},
                                           {"global_step", 40},
                                           {"loss", 0.4},
                                           {"accuracy", 0.85},
                                           {"images_per_sec", 900.0},
                                           {"last_backup", {{"epoch", 1}, {"step", 0}}},
                                           {"evaluation", nullptr}};
  w.in.trainer_status["mnist-evaluator-0"] = {
      {"role", "evaluator"},
      {"evaluation", {{"checkpoint", "ckpt-1"}, {"epoch", 1}, {"loss", 0.5}, {"accuracy", 0.8}}}};
  auto s = StatusOf(Reconcile(w.in));
  EXPECT_EQ(s.progress["epoch"], 2);
  EXPECT_EQ(s.progress["totalEpochs"], 3);
  EXPECT_EQ(s.progress["step"], 10);
  EXPECT_EQ(s.progress["accuracy"], 0.85);
  EXPECT_EQ(s.progress["imagesPerSecond"], 900.0);
  EXPECT_EQ(s.progress["lastBackup"]["epoch"], 1);
  EXPECT_EQ(s.evaluation["checkpoint"], "ckpt-1");
  EXPECT_EQ(s.evaluation["accuracy"], 0.8);
}

// status.progress.lastBackup.time: when the operator first saw that backup; kept while the
// chief reports the same one, renewed with the next.
TEST(Reconcile, TheLastBackupsTimeIsWhenItWasFirstSeen) {
  World w;
  w.Running();
  w.in.trainer_status["mnist-worker-0"] = {{"last_backup", {{"epoch", 1}, {"step", 5}}}};
  const std::string first = kube::FormatTime(w.in.now);
  Decision d = Reconcile(w.in);
  EXPECT_EQ(StatusOf(d).progress["lastBackup"], (json{{"epoch", 1}, {"step", 5}, {"time", first}}));
  w.Keep(d);
  w.in.now += std::chrono::seconds(30);
  d = Reconcile(w.in);
  EXPECT_FALSE(d.status.has_value())
      << "the same backup keeps its time: " << d.status.value_or(json()).dump();
  w.in.trainer_status["mnist-worker-0"] = {{"last_backup", {{"epoch", 1}, {"step", 10}}}};
  const auto s = StatusOf(Reconcile(w.in));
  EXPECT_EQ(s.progress["lastBackup"]["time"], kube::FormatTime(w.in.now));
  EXPECT_EQ(s.progress["lastBackup"]["step"], 10);
}

// A program that serves no /status: the Running condition says so once the gang has run a
// minute without an answer, once (later polls write nothing), and not after the first answer.
TEST(Reconcile, NoStatusAnswerIsSaidOnceInTheRunningCondition) {
  World w;
  w.Running();
  w.Keep(Reconcile(w.in));  // Running since kT0
  const std::string base = "all 2 chief/worker pods are running";
  ASSERT_EQ(api::TrainingJobStatus::FromJson(w.in.job["status"]).Find("Running")->message, base);
  w.in.now = kT0 + seconds(10);
  Decision early = Reconcile(w.in);
  EXPECT_FALSE(early.status.has_value());  // not yet
  ASSERT_TRUE(early.requeue_after.has_value());
  EXPECT_LE(*early.requeue_after, seconds(50));
  w.in.now = kT0 + seconds(61);
  Decision said = Reconcile(w.in);
  const api::Condition running = Cond(said, "Running");
  EXPECT_NE(running.message.find(base + "; the chief has not answered GET /status"),
            std::string::npos)
      << running.message;
  EXPECT_EQ(running.last_transition_time, kube::FormatTime(kT0));
  w.Keep(said);
  w.in.now = kT0 + seconds(90);
  EXPECT_FALSE(Reconcile(w.in).status.has_value());  // said once
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", 1}};
  Decision answered = Reconcile(w.in);
  EXPECT_EQ(Cond(answered, "Running").message, base);
  w.Keep(answered);
  w.in.trainer_status.clear();  // a poll that failed once after progress came: no note
  w.in.now = kT0 + seconds(200);
  EXPECT_FALSE(Reconcile(w.in).status.has_value());  // the message stays as it is
}

// common/status_schema.h end to end: the trainer's own Progress served by its own status
// server, read by the operator's HttpGetJson, turned into status.progress and
// status.evaluation by the reconciler. A field renamed on one side fails here.
TEST(Reconcile, StatusRoundTripsFromTheTrainersStatusServer) {
  train::Progress chief, evaluator;
  chief.Update([](train::ProgressSnapshot& p) {
    p.role = "chief";
    p.state = "training";
    p.epoch = 2;
    p.total_epochs = 3;
    p.step = 17;
    p.global_step = 117;
    p.loss = 0.25;
    p.accuracy = 0.875;
    p.images_per_sec = 1024.5;
    p.last_backup = json{{status_schema::kEpoch.key, 2}, {status_schema::kStep.key, 10}};
  });
  evaluator.Update([](train::ProgressSnapshot& p) {
    p.role = "evaluator";
    p.evaluation = json{{status_schema::kCheckpoint.key, "ckpt-1"},
                        {status_schema::kEpoch.key, 1},
                        {status_schema::kLoss.key, 0.5},
                        {status_schema::kAccuracy.key, 0.75}};
  });
  World w;
  w.Running();
  for (const auto& [pod, served] :
       {std::pair{"mnist-worker-0", &chief}, std::pair{"mnist-evaluator-0", &evaluator}}) {
    auto* progress = served;  // clang before 16 cannot capture a structured binding
    const int port = ::tj::testing::FreePort();
    observe::StatusServer server(
        port, [progress] { return progress->StatusJson(); }, [] { return std::string(); },
        "127.0.0.1");
    ASSERT_TRUE(server.Start().ok());
    auto got = HttpGetJson("127.0.0.1", port, "/status", milliseconds(3000));
    ASSERT_TRUE(got.has_value()) << pod;
    w.in.trainer_status[pod] = *got;
  }
  auto s = StatusOf(Reconcile(w.in));
  EXPECT_EQ(
      s.progress,
      json({{"epoch", 2},
            {"totalEpochs", 3},
            {"step", 17},
            {"loss", 0.25},
            {"accuracy", 0.875},
            {"imagesPerSecond", 1024.5},
            {"lastBackup", {{"epoch", 2}, {"step", 10}, {"time", kube::FormatTime(w.in.now)}}}}));
  EXPECT_EQ(s.evaluation,
            json({{"checkpoint", "ckpt-1"}, {"epoch", 1}, {"loss", 0.5}, {"accuracy", 0.75}}));
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

// The /status answer is the tenant's: values of another type than the schema's are not copied
// (the CRD would refuse the whole status write), the rest of the answer still is.
TEST(Reconcile, ProgressCopiesOnlyValuesOfTheSchemasTypes) {
  World w;
  w.Running();
  json nested = json::array();
  for (int i = 0; i < 50; ++i) nested = json::array({nested});
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", -1},
                                           {"total_epochs", 1.5},
                                           {"step", "10"},
                                           {"loss", nested},
                                           {"accuracy", 0.5},
                                           {"images_per_sec", {{"x", 1}}},
                                           {"last_backup", {{"epoch", 4294967296LL}, {"step", 3}}}};
  w.in.trainer_status["mnist-evaluator-0"] = {
      {"evaluation", {{"checkpoint", std::string(300, 'c')}, {"accuracy", 0.9}}}};
  auto s = StatusOf(Reconcile(w.in));
  EXPECT_EQ(s.progress, (json{{"accuracy", 0.5},
                              {"lastBackup", {{"step", 3}, {"time", kube::FormatTime(w.in.now)}}}}))
      << s.progress;
  EXPECT_TRUE(s.evaluation.is_null() || s.evaluation.empty()) << s.evaluation;
}

TEST(CopyStatusField, KindsAndBounds) {
  const json from = {{"n", 7},
                     {"neg", -7},
                     {"big", 2147483648LL},
                     {"f", 0.5},
                     {"s", "ckpt-3"},
                     {"long", std::string(257, 'x')},
                     {"o", json::object()}};
  json to = json::object();
  EXPECT_TRUE(CopyStatusField(from, {"n", status_schema::Kind::kCount}, to, "n"));
  EXPECT_FALSE(CopyStatusField(from, {"neg", status_schema::Kind::kCount}, to, "neg"));
  EXPECT_FALSE(CopyStatusField(from, {"big", status_schema::Kind::kCount}, to, "big"));
  EXPECT_FALSE(CopyStatusField(from, {"f", status_schema::Kind::kCount}, to, "f"));
  EXPECT_TRUE(CopyStatusField(from, {"f", status_schema::Kind::kNumber}, to, "f"));
  EXPECT_FALSE(CopyStatusField(from, {"s", status_schema::Kind::kNumber}, to, "s"));
  EXPECT_TRUE(CopyStatusField(from, {"s", status_schema::Kind::kText}, to, "s"));
  EXPECT_FALSE(CopyStatusField(from, {"long", status_schema::Kind::kText}, to, "long"));
  EXPECT_FALSE(CopyStatusField(from, {"o", status_schema::Kind::kText}, to, "o"));
  EXPECT_FALSE(CopyStatusField(from, {"absent", status_schema::Kind::kNumber}, to, "absent"));
  EXPECT_FALSE(CopyStatusField(json::array(), {"n", status_schema::Kind::kCount}, to, "n"));
  // Informational fields and objects are never copied as a value.
  EXPECT_FALSE(CopyStatusField(from, {"s", status_schema::Kind::kInfo}, to, "info"));
  EXPECT_FALSE(CopyStatusField(from, {"o", status_schema::Kind::kObject}, to, "object"));
  EXPECT_EQ(to, (json{{"n", 7}, {"f", 0.5}, {"s", "ckpt-3"}}));
}

TEST(Outcome, Classification) {
  EXPECT_TRUE(IsRetryable(api::RestartPolicy::kExitCode, {true, false, 143, ""}));
  EXPECT_TRUE(IsRetryable(api::RestartPolicy::kExitCode, {true, false, 128, ""}));
  EXPECT_FALSE(IsRetryable(api::RestartPolicy::kExitCode, {true, false, 127, ""}));
  EXPECT_TRUE(IsRetryable(api::RestartPolicy::kExitCode, {true, false, 75, ""}));
  EXPECT_FALSE(IsRetryable(api::RestartPolicy::kNever, {true, false, 75, ""}));
  EXPECT_TRUE(IsRetryable(api::RestartPolicy::kNever, {true, true, std::nullopt, ""}));
  EXPECT_EQ(Describe("p", {true, false, 143, ""}), "pod p exited with code 143 (signal 15)");
  EXPECT_EQ(Describe("p", {true, true, std::nullopt, "Evicted"}), "pod p was evicted");
  // Still terminating, attributed from DisruptionTarget: its cause's word, not "deleted".
  EXPECT_EQ(Describe("p", {true, true, std::nullopt, "", api::RestartCause::kEvicted}),
            "pod p was evicted");
  EXPECT_EQ(Describe("p", {true, true, std::nullopt, "", api::RestartCause::kPreempted}),
            "pod p was preempted");
  EXPECT_EQ(Describe("p", {true, true, std::nullopt, "", api::RestartCause::kDeleted}),
            "pod p was deleted");
}

}  // namespace
}  // namespace tj::controller
