// tj-operator end to end on the local cluster (hack/local-cluster.sh with tj-local-node, so
// pods are real tj-trainer processes): the example job to Succeeded with its evaluation; a
// worker deleted mid-training -> gang restart -> resume from the backup -> Succeeded; a
// non-retryable exit code; invalid specs (CRD schema and operator validation); the operator
// killed and restarted mid-job without duplicate pods. Each test has its own namespace and
// its own operator process (--namespace), started with the cluster's kubeconfig.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "operator/api/training_job.h"
#include "tests/integration/kube/local_cluster.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::Eventually;
using testing::LocalCluster;
namespace fs = std::filesystem;

std::string Sh(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

std::string Kubectl(const LocalCluster* c, const std::string& args) {
  return Sh("kubectl --kubeconfig " + c->kubeconfig() + " " + args);
}

json YamlToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& v : n) a.push_back(YamlToJson(v));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted
      if (s == "true" || s == "false") return s == "true";
      char* end = nullptr;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0') return v;
      return s;
    }
    default:
      return nullptr;
  }
}

// The documents of manifests/examples/fmnist.yaml: {PersistentVolumeClaim, TrainingJob}.
std::vector<json> ExampleDocs() {
  std::vector<json> out;
  for (const auto& d :
       YAML::LoadAllFromFile(std::string(TJ_SOURCE_DIR) + "/manifests/examples/fmnist.yaml")) {
    out.push_back(YamlToJson(d));
  }
  return out;
}

// Replaces or adds "--flag value" in a container's args.
void SetArg(json& args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) {
      args[i + 1] = value;
      return;
    }
  }
  args.push_back(flag);
  args.push_back(value);
}

// The example, scaled down: `epochs` epochs of `steps` steps; backups every `save_freq` steps.
json ScaledExample(int epochs, int steps, int save_freq) {
  json job = ExampleDocs().at(1);
  for (const char* t : {"Worker", "Evaluator"}) {
    json& c = job["spec"]["replicaSpecs"][t]["template"]["spec"]["containers"][0];
    SetArg(c["args"], "--epochs", std::to_string(epochs));
    SetArg(c["args"], "--steps-per-epoch", std::to_string(steps));
    if (std::string(t) == "Worker") SetArg(c["args"], "--save-freq", std::to_string(save_freq));
    SetArg(c["args"], "--eval-poll-interval", "0.2");
  }
  job["spec"]["runPolicy"].erase("ttlSecondsAfterFinished");
  return job;
}

class OperatorProcess {
 public:
  // `extra`: more flags; with --metrics-bind-address it must also give
  // --health-probe-bind-address.
  OperatorProcess(const LocalCluster* c, const std::string& ns, const std::string& log_path,
                  bool append = false, std::vector<std::string> extra = {})
      : log_path_(log_path) {
    std::vector<std::string> args = {std::string(TJ_BIN_DIR) + "/tj-operator",
                                     "--kubeconfig",
                                     c->kubeconfig(),
                                     "--namespace",
                                     ns,
                                     "--workers",
                                     "2",
                                     "--progress-poll-seconds",
                                     "1",
                                     "--restart-backoff-ms",
                                     "500",
                                     "--evaluator-grace-seconds",
                                     "120"};
    bool metrics = false;
    for (const auto& e : extra) metrics = metrics || e == "--metrics-bind-address";
    if (!metrics) {
      for (const char* a : {"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}) {
        args.push_back(a);
      }
    }
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = freopen(log_path.c_str(), append ? "a" : "w", stdout);
      (void)f;
      dup2(fileno(stdout), 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~OperatorProcess() { Stop(SIGTERM); }
  void Stop(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
  }
  std::string Log() const { return Sh("cat " + log_path_); }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

class OperatorE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    TJ_REQUIRE_LOCAL_CLUSTER(cluster_);
    if (!fs::exists(std::string(TJ_BIN_DIR) + "/tj-operator") ||
        !fs::exists(std::string(TJ_BIN_DIR) + "/tj-trainer")) {
      GTEST_SKIP() << "build tj-operator and tj-trainer first (" << TJ_BIN_DIR << ")";
    }
    client_ = cluster_->NewClient();
    const std::string out = Kubectl(
        cluster_, "apply -f " + std::string(TJ_SOURCE_DIR) + "/manifests/crd/trainingjob.yaml");
    ASSERT_TRUE(Eventually([&] { return client_->List(api::kTrainingJobs, "default").ok(); },
                           std::chrono::seconds(20)))
        << out;
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string prefix;
    for (char ch : name) prefix += static_cast<char>(std::tolower(ch));
    ns_ = testing::NewNamespace(client_.get(), prefix.substr(0, 20));
    json pvc = ExampleDocs().at(0);
    ASSERT_TRUE(client_->Create(resources::kPersistentVolumeClaims, ns_, pvc).ok());
    log_path_ = cluster_->dir() + "/operator-" + ns_ + ".log";
    op_ = std::make_unique<OperatorProcess>(cluster_, ns_, log_path_);
  }
  void TearDown() override {
    if (HasFailure() && op_) {
      std::cerr << "--- operator log ---\n" << op_->Log().substr(0, 20000) << "\n";
      std::cerr << Kubectl(cluster_, "-n " + ns_ + " get tj,pods -o wide") << "\n"
                << Kubectl(cluster_, "-n " + ns_ + " get tj -o yaml") << "\n";
    }
    op_.reset();
  }

  json Get(const std::string& name) {
    auto j = client_->Get(api::kTrainingJobs, ns_, name);
    return j.ok() ? *j : json();
  }
  // Waits for the job's Succeeded or Failed condition; returns the job.
  json WaitFinished(const std::string& name, std::chrono::seconds timeout) {
    json job;
    Eventually(
        [&] {
          job = Get(name);
          auto s = api::TrainingJobStatus::FromJson(job.value("status", json::object()));
          return s.Finished();
        },
        timeout);
    return job;
  }
  std::vector<json> Pods(const std::string& job) {
    ListOptions lo;
    lo.label_selector = std::string(api::kLabelJobName) + "=" + job;
    auto l = client_->List(resources::kPods, ns_, lo);
    std::vector<json> out;
    if (l.ok()) {
      for (const auto& p : (*l)["items"]) out.push_back(p);
    }
    return out;
  }
  std::string PodLog(const std::string& pod) {
    return Sh("cat " + cluster_->dir() + "/logs/pods/" + ns_ + "_" + pod + "_trainer.log");
  }

  LocalCluster* cluster_ = nullptr;
  std::unique_ptr<RestClient> client_;
  std::string ns_, log_path_;
  std::unique_ptr<OperatorProcess> op_;
};

api::TrainingJobStatus StatusOf(const json& job) {
  return api::TrainingJobStatus::FromJson(job.value("status", json::object()));
}

TEST_F(OperatorE2E, ExampleJobSucceedsWithEvaluation) {
  json job = ScaledExample(2, 15, 5);
  auto created = client_->Create(api::kTrainingJobs, ns_, job);
  ASSERT_TRUE(created.ok()) << created.status().message();
  job = WaitFinished("fmnist", std::chrono::seconds(180));
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2);
  EXPECT_EQ(s.restart_count, 0);
  ASSERT_TRUE(s.evaluation.is_object()) << job.dump(2);
  EXPECT_EQ(s.evaluation["checkpoint"], "ckpt-2") << job.dump(2);  // the last epoch's
  EXPECT_EQ(s.evaluation["epoch"], 2);
  EXPECT_GT(s.evaluation["accuracy"].get<double>(), 0.3);
  EXPECT_TRUE(s.progress.is_object()) << job.dump(2);
  EXPECT_TRUE(s.start_time && s.completion_time);
  // As the replicas stood when the job finished (worker 1 may still have been exiting).
  EXPECT_GE(s.replica_statuses["Worker"].succeeded, 1);
  EXPECT_EQ(s.replica_statuses["Worker"].succeeded + s.replica_statuses["Worker"].active, 2);
  EXPECT_EQ(s.replica_statuses["Evaluator"].succeeded, 1);
  // What a cluster admin sees.
  const std::string get = Kubectl(cluster_, "-n " + ns_ + " get tj");
  EXPECT_NE(get.find("Succeeded"), std::string::npos) << get;
  EXPECT_NE(get.find("ACCURACY"), std::string::npos) << get;
  EXPECT_TRUE(Eventually(
      [&] {
        const std::string d = Kubectl(cluster_, "-n " + ns_ + " describe tj fmnist");
        return d.find("JobSucceeded") != std::string::npos &&
               d.find("CreatedPods") != std::string::npos;
      },
      std::chrono::seconds(10)))
      << Kubectl(cluster_, "-n " + ns_ + " describe tj fmnist");
  EXPECT_NE(PodLog("fmnist-evaluator-0").find("\"checkpoint\":\"ckpt-2\""), std::string::npos)
      << PodLog("fmnist-evaluator-0");
}

TEST_F(OperatorE2E, WorkerDeletedMidTrainingRestartsTheGangAndResumes) {
  json job = ScaledExample(3, 40, 5);
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  // Wait for a backup, then delete worker 1.
  ASSERT_TRUE(Eventually(
      [&] {
        auto s = StatusOf(Get("fmnist"));
        return s.progress.is_object() && s.progress.contains("lastBackup");
      },
      std::chrono::seconds(120)))
      << Get("fmnist").dump(2);
  ASSERT_TRUE(client_->Delete(resources::kPods, ns_, "fmnist-worker-1").ok());
  job = WaitFinished("fmnist", std::chrono::seconds(240));
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2);
  EXPECT_EQ(s.restart_count, 1) << job.dump(2);
  EXPECT_NE(PodLog("fmnist-worker-0").find("\"restored\""), std::string::npos)
      << PodLog("fmnist-worker-0");
  const std::string d = Kubectl(cluster_, "-n " + ns_ + " describe tj fmnist");
  EXPECT_NE(d.find("GangRestart"), std::string::npos) << d;
  EXPECT_NE(d.find("fmnist-worker-1 was deleted"), std::string::npos) << d;
}

TEST_F(OperatorE2E, NonRetryableExitCodeFailsWithTheCode) {
  json job = ScaledExample(2, 10, 5);
  job["metadata"]["name"] = "baddata";
  for (const char* t : {"Worker", "Evaluator"}) {
    json& c = job["spec"]["replicaSpecs"][t]["template"]["spec"]["containers"][0];
    SetArg(c["args"], "--data-dir", "/nonexistent-dataset");
  }
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  job = WaitFinished("baddata", std::chrono::seconds(90));
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Failed")) << job.dump(2);
  EXPECT_EQ(s.Find("Failed")->reason, "NonRetryableExitCode") << job.dump(2);
  EXPECT_NE(s.Find("Failed")->message.find("exited with code 1"), std::string::npos)
      << s.Find("Failed")->message;
  EXPECT_EQ(s.restart_count, 0);
}

TEST_F(OperatorE2E, InvalidSpecs) {
  // What the CRD schema rejects, the API server refuses with the field.
  json bad = ScaledExample(1, 1, 1);
  bad["metadata"]["name"] = "negative";
  bad["spec"]["replicaSpecs"]["Worker"]["replicas"] = -1;
  auto r = client_->Create(api::kTrainingJobs, ns_, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, 422);
  EXPECT_NE(r.error().message.find("spec.replicaSpecs.Worker.replicas"), std::string::npos)
      << r.error().message;
  bad = ScaledExample(1, 1, 1);
  bad["metadata"]["name"] = "badenum";
  bad["spec"]["runPolicy"]["cleanPodPolicy"] = "Sometimes";
  EXPECT_EQ(client_->Create(api::kTrainingJobs, ns_, bad).error().code, 422);
  bad = ScaledExample(1, 1, 1);
  bad["metadata"]["name"] = "noworker";
  bad["spec"]["replicaSpecs"].erase("Worker");
  EXPECT_EQ(client_->Create(api::kTrainingJobs, ns_, bad).error().code, 422);
  bad = ScaledExample(1, 1, 1);
  bad["metadata"]["name"] = "ps";
  bad["spec"]["replicaSpecs"]["PS"] = bad["spec"]["replicaSpecs"]["Evaluator"];
  auto ps = client_->Create(api::kTrainingJobs, ns_, bad);
  ASSERT_FALSE(ps.ok());
  EXPECT_EQ(ps.error().code, 422);

  // A misspelt replica type reaches the operator, which names it.
  json typo = ScaledExample(1, 1, 1);
  typo["metadata"]["name"] = "typo";
  typo["spec"]["replicaSpecs"]["Evaluater"] = typo["spec"]["replicaSpecs"]["Evaluator"];
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, typo).ok());
  typo = WaitFinished("typo", std::chrono::seconds(30));
  ASSERT_TRUE(StatusOf(typo).IsTrue("Failed")) << typo.dump(2);
  EXPECT_EQ(StatusOf(typo).Find("Failed")->reason, "InvalidSpec");
  EXPECT_NE(StatusOf(typo).Find("Failed")->message.find(
                "spec.replicaSpecs.Evaluater: unknown replica type"),
            std::string::npos)
      << StatusOf(typo).Find("Failed")->message;

  // What only the operator can judge: Failed, InvalidSpec, the field named; no pods.
  json job = ScaledExample(1, 1, 1);
  job["metadata"]["name"] = "twocontainers";
  json& cs = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"];
  cs[0]["name"] = "main";
  cs.push_back({{"name", "sidecar"}, {"image", "busybox"}});
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  job = WaitFinished("twocontainers", std::chrono::seconds(30));
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Failed")) << job.dump(2);
  EXPECT_EQ(s.Find("Failed")->reason, "InvalidSpec");
  EXPECT_NE(s.Find("Failed")->message.find("spec.replicaSpecs.Worker.template.spec.containers"),
            std::string::npos)
      << s.Find("Failed")->message;
  EXPECT_TRUE(Pods("twocontainers").empty());
}

TEST_F(OperatorE2E, OperatorRestartedMidJobCreatesNoDuplicates) {
  json job = ScaledExample(3, 150, 50);
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  std::set<std::string> uids;
  ASSERT_TRUE(Eventually(
      [&] {
        auto pods = Pods("fmnist");
        int running = 0;
        for (const auto& p : pods) running += p["status"].value("phase", "") == "Running";
        if (running < 3 || !StatusOf(Get("fmnist")).progress.is_object()) return false;
        for (const auto& p : pods) uids.insert(p["metadata"]["uid"]);
        return true;
      },
      std::chrono::seconds(90)));
  op_->Stop(SIGKILL);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  op_ = std::make_unique<OperatorProcess>(cluster_, ns_, log_path_, /*append=*/true);
  // The new operator finds the running pods and keeps them.
  bool duplicates = false;
  json finished;
  Eventually(
      [&] {
        auto pods = Pods("fmnist");
        if (pods.size() > 3) duplicates = true;
        finished = Get("fmnist");
        return StatusOf(finished).Finished();
      },
      std::chrono::seconds(180));
  EXPECT_FALSE(duplicates);
  auto s = StatusOf(finished);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << finished.dump(2);
  EXPECT_EQ(s.restart_count, 0);
  for (const auto& p : Pods("fmnist")) {
    EXPECT_TRUE(uids.contains(p["metadata"]["uid"].get<std::string>()))
        << "pod " << p["metadata"]["name"] << " was re-created";
  }
}

TEST_F(OperatorE2E, LeaderElectionOneActsTheOtherTakesOver) {
  op_.reset();  // this test runs its own two
  const int base = 20000 + static_cast<int>(getpid() % 20000);
  const std::string lease_args = "--leader-elect";
  auto start = [&](const std::string& name, int port) {
    return std::make_unique<OperatorProcess>(
        cluster_, ns_, cluster_->dir() + "/operator-" + ns_ + "-" + name + ".log", false,
        std::vector<std::string>{"--leader-elect", "--leader-election-namespace", ns_,
                                 "--metrics-bind-address", "127.0.0.1:" + std::to_string(port),
                                 "--health-probe-bind-address",
                                 "127.0.0.1:" + std::to_string(port + 1)});
  };
  auto a = start("a", base);
  ASSERT_TRUE(Eventually([&] { return a->Log().find("\"leading\"") != std::string::npos; },
                         std::chrono::seconds(30)))
      << a->Log();
  auto b = start("b", base + 2);
  EXPECT_TRUE(Eventually(
      [&] {
        return Sh("curl -s http://127.0.0.1:" + std::to_string(base + 3) + "/readyz") == "ok\n";
      },
      std::chrono::seconds(20)));
  const std::string healthz =
      Sh("curl -s http://127.0.0.1:" + std::to_string(base + 1) + "/healthz");
  EXPECT_EQ(healthz, "ok\n");

  json job = ScaledExample(2, 10, 5);
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  job = WaitFinished("fmnist", std::chrono::seconds(120));
  ASSERT_TRUE(StatusOf(job).IsTrue("Succeeded")) << job.dump(2) << a->Log() << b->Log();
  EXPECT_EQ(b->Log().find("\"leading\""), std::string::npos) << b->Log();
  EXPECT_EQ(b->Log().find("job_event"), std::string::npos) << b->Log();  // b never acted
  const std::string metrics = Sh("curl -s http://127.0.0.1:" + std::to_string(base) + "/metrics");
  EXPECT_NE(metrics.find("leader_election_master_status{name=\"tj-operator\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("tj_operator_jobs_successful_total 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("controller_runtime_reconcile_total{controller=\"trainingjob\",result="),
            std::string::npos);
  EXPECT_NE(Sh("curl -s http://127.0.0.1:" + std::to_string(base + 2) + "/metrics")
                .find("leader_election_master_status{name=\"tj-operator\"} 0"),
            std::string::npos);

  // The leader stops (and releases the lease): the other takes over and runs the next job.
  a->Stop(SIGTERM);
  ASSERT_TRUE(Eventually([&] { return b->Log().find("\"leading\"") != std::string::npos; },
                         std::chrono::seconds(30)))
      << b->Log();
  json second = ScaledExample(2, 10, 5);
  second["metadata"]["name"] = "second";
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, second).ok());
  second = WaitFinished("second", std::chrono::seconds(120));
  EXPECT_TRUE(StatusOf(second).IsTrue("Succeeded")) << second.dump(2) << b->Log();
}

TEST_F(OperatorE2E, DeadlineAndTtlEnforcedOnTime) {
  // A job far longer than its 4 s deadline: Failed at the deadline, not on some later event;
  // then deleted 2 s after it finished.
  json job = ScaledExample(50, 0, 100);
  job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 4;
  job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 2;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  job = WaitFinished("fmnist", std::chrono::seconds(30));
  const double failed_after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Failed")) << job.dump(2);
  EXPECT_EQ(s.Find("Failed")->reason, "DeadlineExceeded");
  EXPECT_LT(failed_after, 8.0);
  EXPECT_TRUE(Eventually([&] { return !client_->Get(api::kTrainingJobs, ns_, "fmnist").ok(); },
                         std::chrono::seconds(10)));
}

TEST_F(OperatorE2E, SuspendAndResume) {
  json job = ScaledExample(2, 10, 5);
  job["spec"]["runPolicy"]["suspend"] = true;
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  ASSERT_TRUE(Eventually([&] { return StatusOf(Get("fmnist")).IsTrue("Suspended"); },
                         std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_TRUE(Pods("fmnist").empty());
  auto r = client_->Patch(api::kTrainingJobs, ns_, "fmnist", PatchType::kMerge,
                          {{"spec", {{"runPolicy", {{"suspend", false}}}}}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  job = WaitFinished("fmnist", std::chrono::seconds(120));
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2);
  EXPECT_EQ(s.Find("Suspended")->status, "False");
  EXPECT_EQ(s.Find("Suspended")->reason, "JobResumed");
}

}  // namespace
}  // namespace tj::kube
