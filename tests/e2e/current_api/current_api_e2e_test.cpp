// What the operator takes from a current API server, against the local cluster's:
//   - the CRD's validation rules: `kubectl apply` of a TrainingJob with TFJob's PS, with both
//     Chief and Master, with Master alone or with a name too long for its pods' hostnames is
//     refused with the rule's message, which says what to do; nothing is created;
//   - spec.managedBy: immutable (changed, added or removed: refused), and a job another
//     controller manages gets no pods, no Service and no status while the operator runs the
//     job beside it;
//   - server-side apply: two field managers setting different fields of one job do not
//     conflict; the same field does;
//   - DisruptionTarget: a worker evicted through the Eviction API restarts the gang, and
//     status.restarts.byCause says Evicted (without the condition it would say Deleted);
//   - the operator's version check: it logs the server's version, and refuses an older one.
// Each test skips, saying why, when the API server is older than the operator needs (1.30: CRD
// validation rules, DisruptionTarget).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/http_server.h"
#include "kube/server_version.h"
#include "tests/e2e/support/e2e_support.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::Eventually;
using testing::Kubectl;
using testing::ScaledExample;
using testing::StatusOf;

class CurrentApi : public testing::JobTest {
 protected:
  void SetUp() override {
    TJ_REQUIRE_LOCAL_CLUSTER(cluster_);
    auto client = cluster_->NewClient();
    auto version = ReadServerVersion(client.get());
    ASSERT_TRUE(version.ok()) << version.status().message();
    if (*version < MinimumServerVersion()) {
      GTEST_SKIP() << "needs Kubernetes " << MinimumServerVersion().Minor()
                   << " or newer (CRD validation rules, pods' DisruptionTarget condition)"
                      "; the local cluster's API server runs "
                   << version->text;
    }
    server_ = *version;
    JobTest::SetUp();
  }

  // The job as a file in this test's directory, for kubectl.
  std::string File(const json& job, const std::string& suffix) {
    std::string path = log_path_ + "-" + suffix + ".json";
    ::tj::testing::WriteBytes(path, job.dump());
    return path;
  }

  // A small job of this operator's (no evaluator): 1 epoch of `steps` steps.
  static json SmallJob(const std::string& name, int steps = 4) {
    json job = ScaledExample(1, steps, steps);
    job["metadata"]["name"] = name;
    job["spec"]["replicaSpecs"].erase("Evaluator");
    return job;
  }

  ServerVersion server_;
};

TEST_F(CurrentApi, TheApiServerRefusesTfJobReplicaTypesSayingWhatToDo) {
  struct Case {
    std::string name;
    std::function<void(json&)> change;
    std::vector<std::string> said;  // in kubectl's output
  };
  const json chief = SmallJob("x")["spec"]["replicaSpecs"]["Worker"];
  const std::vector<Case> cases = {
      {"with-ps",
       [](json& j) {
         j["spec"]["replicaSpecs"]["PS"] = {{"replicas", 2}};
       },
       {"spec.replicaSpecs.PS: parameter servers", "are not supported: use Worker replicas",
        "MultiWorkerMirroredStrategy"}},
      {"chief-and-master",
       [&](json& j) {
         j["spec"]["replicaSpecs"]["Chief"] = chief;
         j["spec"]["replicaSpecs"]["Chief"]["replicas"] = 1;
         j["spec"]["replicaSpecs"]["Master"] = chief;
       },
       {"has both Chief and Master", "remove Master"}},
      {"master",
       [&](json& j) { j["spec"]["replicaSpecs"]["Master"] = chief; },
       {"spec.replicaSpecs.Master", "rename it to Chief"}},
      // 60 characters and 2 workers: <name>-worker-1 would have 69.
      {"a" + std::string(59, 'n'),
       [](json&) {},
       {"metadata.name: the pods' hostnames", "54 with up to 10 workers"}},
  };
  for (const Case& c : cases) {
    json job = SmallJob(c.name);
    c.change(job);
    for (const char* how : {"", " --server-side"}) {
      const std::string out =
          Kubectl(cluster_, "-n " + ns_ + " apply" + how + " -f " + File(job, "bad"));
      EXPECT_NE(out.find("is invalid"), std::string::npos) << c.name << how << ": " << out;
      for (const std::string& s : c.said) {
        EXPECT_NE(out.find(s), std::string::npos) << c.name << how << ": " << out;
      }
    }
    EXPECT_FALSE(client_->Get(api::kTrainingJobs, ns_, c.name).ok()) << c.name;
  }
  // The same job without what was refused is accepted (the rules refuse only that).
  json fine = SmallJob("fine");
  fine["spec"]["managedBy"] = "example.com/other";  // no pods for it
  const std::string out = Kubectl(cluster_, "-n " + ns_ + " apply -f " + File(fine, "fine"));
  EXPECT_NE(out.find("trainingjob.tjo.dev/fine created"), std::string::npos) << out;
}

TEST_F(CurrentApi, SpecManagedByIsImmutable) {
  json foreign = SmallJob("foreign");
  foreign["spec"]["managedBy"] = "example.com/other";
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, foreign).ok());
  json ours = SmallJob("ours");
  ours["spec"]["runPolicy"]["suspend"] = true;  // no pods needed
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, ours).ok());
  struct Change {
    const char* job;
    json managed_by;  // the merge patch's value: null removes it
  };
  for (const Change& c : {Change{"foreign", api::kControllerName}, Change{"foreign", nullptr},
                          Change{"ours", "example.com/other"}}) {
    auto r = client_->Patch(api::kTrainingJobs, ns_, c.job, PatchType::kMerge,
                            json{{"spec", {{"managedBy", c.managed_by}}}});
    ASSERT_FALSE(r.ok()) << c.job << " -> " << c.managed_by;
    EXPECT_EQ(r.error().code, 422) << r.error().ToString();
    EXPECT_NE(r.error().ToString().find("spec.managedBy is immutable"), std::string::npos)
        << r.error().ToString();
  }
  // Other fields stay mutable.
  auto r = client_->Patch(api::kTrainingJobs, ns_, "foreign", PatchType::kMerge,
                          json{{"spec", {{"runPolicy", {{"backoffLimit", 5}}}}}});
  EXPECT_TRUE(r.ok()) << r.error().ToString();
}

TEST_F(CurrentApi, AJobManagedByAnotherControllerGetsNoPods) {
  json foreign = SmallJob("foreign");
  foreign["spec"]["managedBy"] = "example.com/other";
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, foreign).ok());
  // This operator's job, created after it: once it has its pods, the operator has seen both.
  json ours = SmallJob("ours");
  ours["spec"]["managedBy"] = api::kControllerName;
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, ours).ok());
  ASSERT_TRUE(Eventually([&] { return Pods("ours").size() == 2; }, seconds(60)))
      << Kubectl(cluster_, "-n " + ns_ + " get pods");
  ASSERT_TRUE(Eventually([&] { return StatusOf(Get("ours")).IsTrue("Created"); }, seconds(30)));
  // A few more passes of the operator (it polls running jobs every second here).
  std::this_thread::sleep_for(seconds(3));
  EXPECT_TRUE(Pods("foreign").empty()) << Kubectl(cluster_, "-n " + ns_ + " get pods");
  EXPECT_FALSE(client_->Get(resources::kServices, ns_, "foreign").ok());
  EXPECT_TRUE(client_->Get(resources::kServices, ns_, "ours").ok());
  const json job = Get("foreign");
  EXPECT_FALSE(job.contains("status")) << job.dump(2);
  const std::string events =
      Kubectl(cluster_, "-n " + ns_ +
                            " get events --field-selector involvedObject.name=foreign "
                            "-o jsonpath='{.items[*].reason}'");
  EXPECT_EQ(events, "") << events;
}

TEST_F(CurrentApi, TwoFieldManagersOfDifferentFieldsDoNotConflict) {
  json job = SmallJob("shared");
  job["spec"]["managedBy"] = "example.com/other";  // the API alone: no pods
  job["spec"]["runPolicy"].erase("backoffLimit");  // team-b's field
  PatchOptions team_a, team_b;
  team_a.field_manager = "team-a";
  team_b.field_manager = "team-b";
  auto a = client_->Patch(api::kTrainingJobs, ns_, "shared", PatchType::kApply, job, team_a);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  // team-b owns the backoff limit and a failure policy; team-a then changes the workers.
  const json b_config = {
      {"apiVersion", api::kApiVersion},
      {"kind", api::kKind},
      {"metadata", {{"name", "shared"}}},
      {"spec",
       {{"runPolicy", {{"backoffLimit", 7}}},
        {"failurePolicy",
         {{"rules", json::array({{{"action", "FailJob"}, {"onCauses", {"Preempted"}}}})}}}}}};
  auto b = client_->Patch(api::kTrainingJobs, ns_, "shared", PatchType::kApply, b_config, team_b);
  ASSERT_TRUE(b.ok()) << b.error().ToString();
  job["spec"]["replicaSpecs"]["Worker"]["replicas"] = 3;
  a = client_->Patch(api::kTrainingJobs, ns_, "shared", PatchType::kApply, job, team_a);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  const json now = Get("shared");
  EXPECT_EQ(now["spec"]["replicaSpecs"]["Worker"]["replicas"], 3) << now.dump(2);
  EXPECT_EQ(now["spec"]["runPolicy"]["backoffLimit"], 7) << now.dump(2);
  EXPECT_EQ(now["spec"]["failurePolicy"]["rules"][0]["action"], "FailJob") << now.dump(2);
  std::set<std::string> managers;
  for (const json& m : now["metadata"]["managedFields"]) managers.insert(m.value("manager", ""));
  EXPECT_TRUE(managers.contains("team-a") && managers.contains("team-b")) << now.dump(2);
  // The same field: a conflict, named (so the test above can fail).
  json b_replicas = b_config;
  b_replicas["spec"]["replicaSpecs"]["Worker"]["replicas"] = 1;
  b = client_->Patch(api::kTrainingJobs, ns_, "shared", PatchType::kApply, b_replicas, team_b);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, 409) << b.error().ToString();
  EXPECT_NE(b.error().ToString().find("team-a"), std::string::npos) << b.error().ToString();
}

TEST_F(CurrentApi, AnEvictedWorkersGangRestartIsAttributedFromDisruptionTarget) {
  // A paced job (a backup write held 1.5 s), so that the eviction lands mid-run.
  json job = testing::FaultJob(testing::PaceFailpoint(1500));
  job["spec"]["replicaSpecs"].erase("Evaluator");
  job["spec"]["runPolicy"]["backoffLimit"] = 0;  // an eviction counted would fail the job
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  ASSERT_TRUE(FirstBackup("fmnist-worker-0", seconds(180)).is_object());
  const std::string body =
      File(json{{"apiVersion", "policy/v1"},
                {"kind", "Eviction"},
                {"metadata", {{"name", "fmnist-worker-1"}, {"namespace", ns_}}}},
           "eviction");
  const std::string evicted = Kubectl(cluster_, "create --raw /api/v1/namespaces/" + ns_ +
                                                    "/pods/fmnist-worker-1/eviction -f " + body);
  ASSERT_EQ(evicted.find("rror"), std::string::npos) << evicted;
  // The condition the API server set before the deletion, while the pod terminates.
  auto pod = client_->Get(resources::kPods, ns_, "fmnist-worker-1");
  if (pod.ok()) {
    bool has_condition = false;
    for (const json& c : (*pod)["status"].value("conditions", json::array())) {
      has_condition = has_condition || (c.value("type", "") == "DisruptionTarget" &&
                                        c.value("reason", "") == "EvictionByEvictionAPI");
    }
    EXPECT_TRUE(has_condition) << pod->dump(2);
  }
  ASSERT_TRUE(Eventually([&] { return StatusOf(Get("fmnist")).restart_count == 1; }, seconds(120)))
      << Get("fmnist").dump(2);
  const json now = Get("fmnist");
  const auto s = StatusOf(now);
  EXPECT_EQ(s.restarts.by_cause, (std::map<std::string, int32_t>{{"Evicted", 1}})) << now.dump(2);
  EXPECT_EQ(s.restarts.backoff_limit_used, 0) << now.dump(2);
  EXPECT_FALSE(s.IsTrue("Failed")) << now.dump(2);
  const std::string events =
      Kubectl(cluster_, "-n " + ns_ +
                            " get events --field-selector "
                            "reason=GangRestart -o custom-columns=M:.message");
  EXPECT_NE(events.find("Evicted, not counted against backoffLimit"), std::string::npos) << events;
  EXPECT_NE(events.find("fmnist-worker-1"), std::string::npos) << events;
}

TEST_F(CurrentApi, TheOperatorLogsTheServersVersion) {
  ASSERT_TRUE(Eventually([&] { return op_->Log().find("api_server_version") != std::string::npos; },
                         seconds(30)))
      << op_->Log();
  EXPECT_NE(op_->Log().find(server_.text), std::string::npos) << op_->Log();
}

// A free TCP port on the loopback address (bound, then released).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// No server older than 1.30 runs on this machine: an HTTP server that answers GET /version as
// one would stands in for it. tj-operator must exit 1 at once, naming both versions and what
// to do, before it watches anything.
TEST(OperatorVersionCheck, RefusesAnOlderServerAndGarbageSayingWhatToDo) {
  const std::string bin = std::string(TJ_BIN_DIR) + "/tj-operator";
  if (::access(bin.c_str(), X_OK) != 0) GTEST_SKIP() << "build tj-operator first (" << bin << ")";
  struct Case {
    json answer;
    std::vector<std::string> said;
  };
  const std::vector<Case> cases = {
      {{{"major", "1"}, {"minor", "29"}, {"gitVersion", "v1.29.4"}},
       {"runs Kubernetes v1.29.4", "needs Kubernetes 1.30 or newer", "upgrade the cluster"}},
      {{{"major", "1"}, {"minor", "20"}, {"gitVersion", "v1.20.2-gke.1"}},
       {"runs Kubernetes v1.20.2-gke.1", "needs Kubernetes 1.30 or newer"}},
      {{{"gitVersion", "garbage"}}, {"GET /version names no version"}},
  };
  const ::tj::testing::TempDir dir("tj-operator-version-check");
  for (const Case& c : cases) {
    const int port = FreePort();
    ASSERT_GT(port, 0);
    std::map<std::string, HttpServer::Handler> handlers = {
        {"/version", [&c] {
           return HttpAnswer{200, "application/json", c.answer.dump()};
         }}};
    HttpServer server("127.0.0.1", port, handlers);
    ASSERT_TRUE(server.Start().ok());
    const std::string kubeconfig =
        dir.Write("kubeconfig",
                  "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
                  "    server: http://127.0.0.1:" +
                      std::to_string(port) +
                      "\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\n"
                      "current-context: c\nusers:\n- name: u\n  user: {}\n");
    ::tj::testing::Subprocess op({bin, "--kubeconfig", kubeconfig, "--metrics-bind-address", "0",
                                  "--health-probe-bind-address", "0"},
                                 {}, dir.Join("operator"));
    const std::optional<int> code = op.Wait(std::chrono::seconds(20));
    ASSERT_TRUE(code.has_value()) << "still running against " << c.answer << "\n" << op.Stdout();
    EXPECT_EQ(*code, 1) << op.Stdout() << op.Stderr();
    const std::string said = op.Stdout() + op.Stderr();
    for (const std::string& s : c.said) EXPECT_NE(said.find(s), std::string::npos) << said;
    EXPECT_EQ(said.find("operator_started"), std::string::npos) << said;
  }
}

}  // namespace
}  // namespace tj::kube
