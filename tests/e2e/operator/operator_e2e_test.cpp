// tj-operator end to end on the local cluster (hack/local-cluster.sh; under ctest its real
// node, so pods are containers of localhost/tj-trainer-cpu): the example job to Succeeded with its
// evaluation; a worker deleted mid-training -> gang restart -> resume from the backup -> Succeeded;
// a non-retryable exit code; invalid specs (CRD schema and operator validation); the operator
// killed and restarted mid-job without duplicate pods. Each test has its own namespace and
// its own operator process (--namespace), started with the cluster's kubeconfig.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <sstream>
#include <thread>

#include "kube/server_version.h"
#include "tests/e2e/support/e2e_support.h"
#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::Eventually;
using testing::Kubectl;
using testing::OperatorProcess;
using testing::ScaledExample;
using testing::SetArg;
using testing::SetEnv;
using testing::Sh;
using testing::StatusOf;

class OperatorE2E : public testing::JobTest {};

TEST_F(OperatorE2E, ExampleJobSucceedsWithEvaluation) {
  json job = ScaledExample(2, 15, 5);
  auto created = client_->Create(api::kTrainingJobs, ns_, job);
  ASSERT_TRUE(created.ok()) << created.status().message();
  // What a script waits with: kubectl wait returns (exit 0) when the job succeeds.
  const std::string waited = Kubectl(
      cluster_,
      "-n " + ns_ + " wait --for=condition=Succeeded tj/fmnist --timeout=55s && echo WAITED");
  EXPECT_NE(waited.find("WAITED"), std::string::npos) << waited;
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
  // Gated on the trainer's own progress, never on how fast this machine trains (3 epochs of 40
  // steps take about a second on a CPU with AVX-512): the chief's second backup write holds
  // 15 s before its rename, and the third waits for it, so the gang cannot pass its third save
  // point (step 15 of 120) before worker 1 is deleted inside that hold.
  json job = ScaledExample(3, 40, 5);
  SetEnv(job, "Worker", "TJ_FAILPOINTS", "backup.before_rename=sleep:15000@2");
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  ASSERT_TRUE(WaitForPodLog("fmnist-worker-0", "failpoint backup.before_rename: sleep",
                            std::chrono::seconds(120)))
      << PodLog("fmnist-worker-0");
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
  // What the restart cost is in status.goodput, under its cause.
  ASSERT_EQ(s.goodput.lost.count("Deleted"), 1U) << job.dump(2);
  EXPECT_EQ(s.goodput.lost["Deleted"].restarts, 1) << job.dump(2);
  if (s.goodput.ratio) {
    EXPECT_LE(*s.goodput.ratio, 1.0);
  }
}

// A finished training is never thrown away: worker 1 is deleted after the chief has trained
// to the end (its train_end is logged; the failpoint holds every trainer 4 s before it exits
// 0, as a chief writing a large model would). The job Succeeds with no restart; before, the
// deletion restarted the gang, and the new one trained from scratch (the chief had removed
// its backups). The hold stays under the settle time (10 s for these tests' operator): a
// chief still running when the settle time expires is restarted with its gang.
TEST_F(OperatorE2E, AWorkerDeletedAfterTheChiefFinishedTrainingRestartsNothing) {
  json job = ScaledExample(2, 10, 5);
  SetEnv(job, "Worker", "TJ_FAILPOINTS", "train.after_end=sleep:4000");
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  ASSERT_TRUE(WaitForPodLog("fmnist-worker-0", "failpoint train.after_end: sleep",
                            std::chrono::seconds(120)))
      << PodLog("fmnist-worker-0");
  ASSERT_TRUE(client_->Delete(resources::kPods, ns_, "fmnist-worker-1").ok());
  job = WaitFinished("fmnist", std::chrono::seconds(180));
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2);
  EXPECT_EQ(s.restart_count, 0) << job.dump(2);
  const std::string d = Kubectl(cluster_, "-n " + ns_ + " describe tj fmnist");
  EXPECT_EQ(d.find("GangRestart"), std::string::npos) << d;
}

// A job deleted and created again under the same name while a pod of the old one is still
// terminating (held here by a finalizer): the new job waits for that pod to go rather than
// taking it for its own (it would look deleted once it went, and restart the new gang).
TEST_F(OperatorE2E, RecreatedJobWaitsForTheOldJobsTerminatingPod) {
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, ScaledExample(1, 10, 5)).ok());
  ASSERT_TRUE(
      Eventually([&] { return client_->Get(resources::kPods, ns_, "fmnist-worker-1").ok(); },
                 std::chrono::seconds(60)));
  const json hold = {{"metadata", {{"finalizers", {"tjo.dev/e2e-hold"}}}}};
  ASSERT_TRUE(
      client_->Patch(resources::kPods, ns_, "fmnist-worker-1", PatchType::kMerge, hold).ok());
  DeleteOptions background;
  background.propagation_policy = "Background";
  ASSERT_TRUE(client_->Delete(api::kTrainingJobs, ns_, "fmnist", background).ok());
  auto old_pod_terminating = [&] {
    auto p = client_->Get(resources::kPods, ns_, "fmnist-worker-1");
    return p.ok() && (*p)["metadata"].contains("deletionTimestamp");
  };
  ASSERT_TRUE(Eventually(
      [&] {
        return !client_->Get(api::kTrainingJobs, ns_, "fmnist").ok() && old_pod_terminating();
      },
      std::chrono::seconds(60)));
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, ScaledExample(1, 10, 5)).ok());
  // While the old pod stays, the new job gets no worker 1 and restarts nothing.
  ASSERT_TRUE(
      Eventually([&] { return client_->Get(resources::kPods, ns_, "fmnist-worker-0").ok(); },
                 std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::seconds(5));  // passes that must not act on it
  ASSERT_TRUE(old_pod_terminating());
  EXPECT_EQ(StatusOf(Get("fmnist")).restart_count, 0) << Get("fmnist").dump(2);
  ASSERT_TRUE(client_
                  ->Patch(resources::kPods, ns_, "fmnist-worker-1", PatchType::kMerge,
                          json{{"metadata", {{"finalizers", nullptr}}}})
                  .ok());
  json job = WaitFinished("fmnist", std::chrono::seconds(180));
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2);
  EXPECT_EQ(s.restart_count, 0) << job.dump(2);
  const std::string d = Kubectl(cluster_, "-n " + ns_ + " describe tj fmnist");
  EXPECT_EQ(d.find("GangRestart"), std::string::npos) << d;
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
  ExpectFailedWithExitCode(job, 1);
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
  bad["metadata"]["name"] = "my.job";  // a valid object name, not a valid Service name
  EXPECT_EQ(client_->Create(api::kTrainingJobs, ns_, bad).error().code, 422);

  // TFJob's PS: the CRD's validation rule refuses it on a server that has them (1.30+ as the
  // operator requires); an older one lets it reach the operator. Either says what to use.
  bad = ScaledExample(1, 1, 1);
  bad["metadata"]["name"] = "ps";
  bad["spec"]["replicaSpecs"]["PS"] = bad["spec"]["replicaSpecs"]["Evaluator"];
  auto server = ReadServerVersion(client_.get());
  ASSERT_TRUE(server.ok()) << server.status().message();
  r = client_->Create(api::kTrainingJobs, ns_, bad);
  if (*server >= MinimumServerVersion()) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, 422);
    EXPECT_NE(r.error().message.find("use Worker replicas with MultiWorkerMirroredStrategy"),
              std::string::npos)
        << r.error().message;
    // As a job created before the rule existed would: the operator's own check.
    auto spec = api::ParseSpec(bad["spec"]);
    ASSERT_FALSE(spec.ok());
    EXPECT_NE(spec.status().message().find("use Worker replicas with MultiWorkerMirroredStrategy"),
              std::string::npos);
    bad = json();
  } else {
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    bad = WaitFinished("ps", std::chrono::seconds(30));
  }
  if (!bad.is_null()) {
    ASSERT_TRUE(StatusOf(bad).IsTrue("Failed")) << bad.dump(2);
    EXPECT_NE(StatusOf(bad).Find("Failed")->message.find("use Worker replicas with "
                                                         "MultiWorkerMirroredStrategy"),
              std::string::npos)
        << StatusOf(bad).Find("Failed")->message;
  }

  // A misspelt replica type is refused: by the API server's strict field validation (kubectl
  // 1.25+ asks for it: `unknown field "spec.replicaSpecs.Evaluater"`), or by an older kubectl
  // from the schema the server publishes (which also makes `kubectl explain` work down to
  // every field).
  json typo = ScaledExample(1, 1, 1);
  typo["metadata"]["name"] = "typo";
  typo["spec"]["replicaSpecs"]["Evaluater"] = typo["spec"]["replicaSpecs"]["Evaluator"];
  const std::string typo_file = cluster_->dir() + "/typo-" + ns_ + ".json";
  ASSERT_TRUE(::tj::testing::WriteBytes(typo_file, typo.dump()));
  std::string out;
  ASSERT_TRUE(Eventually(
      [&] {
        out = Kubectl(cluster_, "-n " + ns_ + " apply -f " + typo_file);
        return out.find("unknown field \"Evaluater\"") != std::string::npos ||
               out.find("unknown field \"spec.replicaSpecs.Evaluater\"") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << out;
  EXPECT_NE(Kubectl(cluster_, "explain trainingjob.spec.replicaSpecs.Worker.replicas")
                .find("Number of worker pods"),
            std::string::npos);

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
  op_ = std::make_unique<OperatorProcess>(cluster_, ns_, log_path_, /*keep_previous_log=*/true);
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
  // Free ports, not ones derived from the pid: another process may hold those.
  const int a_metrics = ::tj::testing::FreePort(), a_health = ::tj::testing::FreePort();
  const int b_metrics = ::tj::testing::FreePort(), b_health = ::tj::testing::FreePort();
  const std::string lease_args = "--leader-elect";
  auto start = [&](const std::string& name, int port, int health_port) {
    return std::make_unique<OperatorProcess>(
        cluster_, ns_, cluster_->dir() + "/operator-" + ns_ + "-" + name + ".log", false,
        std::vector<std::string>{"--leader-elect", "--leader-election-namespace", ns_,
                                 "--metrics-bind-address", "127.0.0.1:" + std::to_string(port),
                                 "--health-probe-bind-address",
                                 "127.0.0.1:" + std::to_string(health_port)});
  };
  auto a = start("a", a_metrics, a_health);
  ASSERT_TRUE(Eventually([&] { return a->Log().find("\"leading\"") != std::string::npos; },
                         std::chrono::seconds(30)))
      << a->Log();
  auto b = start("b", b_metrics, b_health);
  EXPECT_TRUE(Eventually(
      [&] {
        return Sh("curl -s http://127.0.0.1:" + std::to_string(b_health) + "/readyz") == "ok\n";
      },
      std::chrono::seconds(20)));
  const std::string healthz =
      Sh("curl -s http://127.0.0.1:" + std::to_string(a_health) + "/healthz");
  EXPECT_EQ(healthz, "ok\n");

  json job = ScaledExample(2, 10, 5);
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  job = WaitFinished("fmnist", std::chrono::seconds(120));
  ASSERT_TRUE(StatusOf(job).IsTrue("Succeeded")) << job.dump(2) << a->Log() << b->Log();
  EXPECT_EQ(b->Log().find("\"leading\""), std::string::npos) << b->Log();
  EXPECT_EQ(b->Log().find("job_event"), std::string::npos) << b->Log();  // b never acted
  const std::string metrics =
      Sh("curl -s http://127.0.0.1:" + std::to_string(a_metrics) + "/metrics");
  EXPECT_NE(metrics.find("leader_election_master_status{name=\"tj-operator\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("tj_operator_jobs_successful_total{namespace=\"" + ns_ + "\"} 1"),
            std::string::npos)
      << metrics;
  // What the ecosystem expects beside the job counters, from the real operator.
  for (const char* want :
       {"rest_client_requests_total{code=\"201\",method=\"POST\",host=\"",
        "rest_client_request_duration_seconds_bucket{verb=\"GET\"",
        "workqueue_queue_duration_seconds_count{name=\"trainingjob\"}",
        "workqueue_work_duration_seconds_count{name=\"trainingjob\"}",
        "\nprocess_cpu_seconds_total ", "\nprocess_resident_memory_bytes ", "\nprocess_open_fds ",
        "\nprocess_start_time_seconds ", "tj_operator_build_info{version=\""}) {
    EXPECT_NE(metrics.find(want), std::string::npos) << want << "\n" << metrics;
  }
  // Every log line of the operator has its time and level.
  std::istringstream log_lines(a->Log());
  for (std::string line; std::getline(log_lines, line);) {
    const json j = json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("ts") && j.contains("level")) << line;
  }
  EXPECT_NE(metrics.find("controller_runtime_reconcile_total{controller=\"trainingjob\",result="),
            std::string::npos);
  EXPECT_NE(Sh("curl -s http://127.0.0.1:" + std::to_string(b_metrics) + "/metrics")
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
