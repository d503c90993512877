// Workload faults on the local cluster (label `fault`): trainer processes killed by PID at
// chosen moments (a worker mid-step, the chief while it writes a backup, the evaluator, two
// in a row), each ending Succeeded with final weights bitwise equal to those of the same job
// run without faults; and a job that keeps failing until backoffLimit is exhausted, which
// must end Failed with a clear reason and nothing left running.
//
// The moments are made deterministic with the trainer's failpoints (common/failpoint.h),
// set through the Worker template's env: `backup.before_rename=sleep:<ms>` holds every backup
// write just before its rename; since the chief waits for the previous write before the next
// one, this also paces training, so a fault lands while training is still going on.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kube/server_version.h"
#include "operator/controller/job_resources.h"
#include "tests/e2e/support/e2e_support.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::Eventually;
using testing::FaultJob;
using testing::Kubectl;
using testing::PaceFailpoint;
using testing::StatusOf;
using testing::TrainerPids;
namespace fs = std::filesystem;
using std::chrono::seconds;

// Each backup write held this long (see PaceFailpoint).
constexpr int kPaceMs = 400;
const std::string kPace = PaceFailpoint(kPaceMs);

constexpr char kJob[] = "fmnist";
constexpr char kChief[] = "fmnist-worker-0";  // no Chief replica: worker 0 is the chief
constexpr char kWorker1[] = "fmnist-worker-1";
constexpr char kEvaluator[] = "fmnist-evaluator-0";
const seconds kStartTimeout(180);   // from creation to the first backup
const seconds kFinishTimeout(420);  // from the fault to the end, restarts included

class FaultWorkload : public testing::JobTest {
 protected:
  // The final weights digest of FaultJob run without faults (the pace changes no result).
  std::string ReferenceSha() { return JobTest::ReferenceSha(FaultJob(""), kFinishTimeout); }

  json FirstBackup() { return JobTest::FirstBackup(kChief, kStartTimeout); }
  json WaitResumed(int n) { return JobTest::WaitResumed(kChief, n, kFinishTimeout); }

  std::string Describe() { return Kubectl(cluster_, "-n " + ns_ + " describe tj " + kJob); }
};

TEST_F(FaultWorkload, UninterruptedRunIsTheReference) {
  const std::string sha = ReferenceSha();
  EXPECT_EQ(sha.size(), 64u);
}

TEST_F(FaultWorkload, WorkerKilledMidStepRestartsTheGangWithEqualWeights) {
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, FaultJob(kPace)).ok());
  const json backup = FirstBackup();
  ASSERT_TRUE(backup.is_object());
  // Worker 1 is inside a step (computing, or waiting in the all-reduce for the chief).
  ASSERT_GT(SignalTrainer(kWorker1, SIGKILL), 0);
  const json restored = WaitResumed(1);
  // The backups of this job (its UID) on the shared volume.
  const std::string scoped = "/data/backup/job-" + Get(kJob)["metadata"].value("uid", "") + "/";
  EXPECT_EQ(restored.value("path", "").rfind(scoped + "backup-", 0), 0u) << restored.dump();
  ExpectSucceededWithReferenceWeights(kJob, kChief, ReferenceSha(), 1, kFinishTimeout);
  const std::string d = Describe();
  EXPECT_NE(d.find("GangRestart"), std::string::npos) << d;
  EXPECT_NE(d.find(kWorker1), std::string::npos) << d;
}

// On Kubernetes 1.36+ (--restart-in-place=auto) the same fault restarts the gang in place:
// the kubelet restarts the killed worker's containers and, once its trainer has lost its peer
// and exited 75, the chief's; the pods (their UIDs, IPs and claims) stay, the operator counts
// one gang restart of the program, and the job ends with the reference weights.
TEST_F(FaultWorkload, WorkerKilledRestartsTheGangInPlaceWithEqualWeights) {
  auto server = kube::ReadServerVersion(client_.get());
  ASSERT_TRUE(server.ok()) << server.status().message();
  if (*server < kube::ServerVersion{1, 36, 0, ""}) {
    GTEST_SKIP() << "the API server is " << server->text << ": in-place restarts need 1.36+";
  }
  op_.reset();
  op_ = std::make_unique<testing::OperatorProcess>(
      cluster_, ns_, log_path_, /*keep_previous_log=*/true,
      std::vector<std::string>{"--restart-in-place=auto"});
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, FaultJob(kPace)).ok());
  ASSERT_TRUE(FirstBackup().is_object());
  auto uid_of = [&](const std::string& pod) {
    auto p = client_->Get(kube::resources::kPods, ns_, pod);
    return p.ok() ? (*p)["metadata"].value("uid", "") : "";
  };
  const std::string chief_uid = uid_of(kChief), worker_uid = uid_of(kWorker1);
  const pid_t killed = SignalTrainer(kWorker1, SIGKILL);
  ASSERT_GT(killed, 0);
  // Gang 0 again, in new processes of the same pods, resumed from a backup.
  ASSERT_TRUE(Eventually(
      [&] {
        const std::vector<pid_t> now = TrainerPids(ns_, kWorker1, 0);
        return now.size() == 1 && now[0] != killed;
      },
      seconds(120)))
      << Kubectl(cluster_, "-n " + ns_ + " get pods -o wide");
  const json restored = WaitResumed(0);
  ASSERT_TRUE(restored.is_object());
  EXPECT_EQ(uid_of(kChief), chief_uid);
  EXPECT_EQ(uid_of(kWorker1), worker_uid);
  ExpectSucceededWithReferenceWeights(kJob, kChief, ReferenceSha(), 0, kFinishTimeout);
  const json done = Get(kJob);
  const auto st = StatusOf(done);
  EXPECT_EQ(st.restarts.in_place, 1) << done.dump(2);
  EXPECT_EQ(st.restarts.by_cause, (std::map<std::string, int32_t>{{"Failed", 1}})) << done.dump(2);
  EXPECT_EQ(done["status"]["restarts"].value("total", -1), 1) << done.dump(2);
  const std::string d = Describe();
  EXPECT_NE(d.find("GangRestartedInPlace"), std::string::npos) << d;
}

TEST_F(FaultWorkload, ChiefKilledWhileWritingABackupResumesFromThePreviousOne) {
  // The chief's second backup write holds 10 s between its temporary file and the rename.
  ASSERT_TRUE(
      client_->Create(api::kTrainingJobs, ns_, FaultJob("backup.before_rename=sleep:10000@2"))
          .ok());
  ASSERT_TRUE(WaitForPodLog(kChief, "failpoint backup.before_rename: sleep", kStartTimeout))
      << PodLog(kChief);
  const std::vector<json> saved = PodEvents(kChief, "backup_saved");
  ASSERT_EQ(saved.size(), 1u) << PodLog(kChief);  // the first is durable, the second is not
  const std::vector<pid_t> pids = TrainerPids(ns_, kChief);
  ASSERT_EQ(pids.size(), 1u);
  // What the chief sees of its backup directory (the job's own, by UID): backup-1, and
  // backup-2 only as a temporary file (through the process's own mount namespace, where the
  // claim is mounted at /data).
  const fs::path dir = "/proc/" + std::to_string(pids[0]) + "/root/data/backup/job-" +
                       Get(kJob)["metadata"].value("uid", "");
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  ASSERT_FALSE(ec) << "listing " << dir << ": " << ec.message()
                   << " (the example mounts its claim at /data: is tj-process-node running pods "
                      "in mount namespaces, as it does as root?)";
  EXPECT_TRUE(std::ranges::count(names, "backup-1") == 1 &&
              !std::ranges::count(names, "backup-2") && std::ranges::count(names, "fence") == 1)
      << ::testing::PrintToString(names);
  EXPECT_TRUE(std::ranges::any_of(names, [](const std::string& n) {
    return n.rfind(".backup-2.tmp.", 0) == 0;
  })) << ::testing::PrintToString(names);
  ASSERT_EQ(::kill(pids[0], SIGKILL), 0);

  const json restored = WaitResumed(1);
  EXPECT_TRUE(restored.value("path", "").ends_with("/backup-1")) << restored.dump();
  EXPECT_EQ(restored.value("epoch", -1), saved[0].value("epoch", -2)) << restored.dump();
  EXPECT_EQ(restored.value("step", -1), saved[0].value("step", -2)) << restored.dump();
  ExpectSucceededWithReferenceWeights(kJob, kChief, ReferenceSha(), 1, kFinishTimeout);
}

TEST_F(FaultWorkload, EvaluatorKilledIsRestartedAloneAndEvaluatesTheFinalCheckpoint) {
  // A slower pace: the kill must land before the chief's last checkpoint, and the first
  // evaluation (on the whole test set) may itself take seconds on a loaded machine.
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, FaultJob(PaceFailpoint(3 * kPaceMs))).ok());
  ASSERT_TRUE(WaitForPodLog(kEvaluator, "\"evaluation\"", kStartTimeout)) << PodLog(kEvaluator);
  ASSERT_GT(SignalTrainer(kEvaluator, SIGKILL), 0);
  // The evaluator does not restart the gang.
  ExpectSucceededWithReferenceWeights(kJob, kChief, ReferenceSha(), 0, kFinishTimeout);
  const json job = Get(kJob);
  const auto s = StatusOf(job);
  EXPECT_EQ(s.evaluator_restarts, 1) << job.dump(2);
  ASSERT_TRUE(s.evaluation.is_object()) << job.dump(2);
  EXPECT_EQ(s.evaluation.value("checkpoint", ""), "ckpt-" + std::to_string(testing::kFaultEpochs))
      << job.dump(2);
  EXPECT_EQ(s.evaluation.value("epoch", 0), testing::kFaultEpochs) << job.dump(2);
  EXPECT_NE(Describe().find("EvaluatorRestart"), std::string::npos) << Describe();
}

// runPolicy.progressDeadlineSeconds: every worker of the first gang stops before its 25th step
// for two minutes (a hang that times nothing out: no collective is waiting yet), while its
// /status keeps answering the same step. 15 s later the operator restarts the gang with the
// cause Stalled; the next gang resumes from the last backup and ends with the reference
// weights.
TEST_F(FaultWorkload, AStepThatStopsAdvancingIsRestartedAsStalledAndSucceeds) {
  json job = FaultJob(kPace + ";train.step=sleep:120000@25%0");
  job["spec"]["runPolicy"]["progressDeadlineSeconds"] = 15;
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  ASSERT_TRUE(WaitResumed(1).is_object());
  ExpectSucceededWithReferenceWeights(kJob, kChief, ReferenceSha(), 1, kFinishTimeout);
  const json done = Get(kJob);
  const auto s = StatusOf(done);
  EXPECT_EQ(s.restarts.by_cause.count("Stalled") ? s.restarts.by_cause.at("Stalled") : 0, 1)
      << done.dump(2);
  EXPECT_NE(Describe().find("Stalled"), std::string::npos) << Describe();
}

TEST_F(FaultWorkload, TwoFaultsInARowWorkerThenChiefRightAfterResuming) {
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, FaultJob(kPace)).ok());
  ASSERT_TRUE(FirstBackup().is_object());
  ASSERT_GT(SignalTrainer(kWorker1, SIGKILL), 0);
  ASSERT_TRUE(WaitResumed(1).is_object());
  ASSERT_GT(SignalTrainer(kChief, SIGKILL), 0);
  ASSERT_TRUE(WaitResumed(2).is_object());
  ExpectSucceededWithReferenceWeights(kJob, kChief, ReferenceSha(), 2, kFinishTimeout);
}

TEST_F(FaultWorkload, BackoffLimitExhaustedFailsAndLeavesNothingRunning) {
  json job = FaultJob(kPace);
  job["spec"]["runPolicy"]["backoffLimit"] = 1;
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  ASSERT_TRUE(FirstBackup().is_object());
  ASSERT_GT(SignalTrainer(kWorker1, SIGKILL), 0);
  ASSERT_TRUE(WaitResumed(1).is_object());
  ASSERT_TRUE(Eventually([&] { return TrainerPids(ns_, kWorker1, 1).size() == 1; }, seconds(60)));
  ASSERT_GT(SignalTrainer(kWorker1, SIGKILL), 0);

  job = WaitFinished(kJob, kFinishTimeout);
  const auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Failed")) << job.dump(2);
  EXPECT_EQ(s.Find("Failed")->reason, "BackoffLimitExceeded") << job.dump(2);
  // The message names the failed pod: the killed worker, or, when the chief's own exit 75
  // (peer lost) reached the API server first, as a real kubelet's status updates may, the chief
  // with that reason.
  const std::string message = s.Find("Failed")->message;
  EXPECT_TRUE(message.find(kWorker1) != std::string::npos ||
              message.find("exited with code 75 (peer lost)") != std::string::npos)
      << message;
  EXPECT_NE(message.find("backoffLimit 1"), std::string::npos) << message;
  EXPECT_EQ(s.restart_count, 1) << job.dump(2);
  EXPECT_TRUE(Eventually(
      [&] { return Describe().find("BackoffLimitExceeded") != std::string::npos; }, seconds(20)))
      << Describe();

  // cleanPodPolicy Running: no pod left Running, no trainer process of the namespace alive.
  EXPECT_TRUE(Eventually(
      [&] {
        for (const auto& p : Pods(kJob)) {
          if (p["status"].value("phase", "") == "Running") return false;
        }
        return TrainerPids(ns_).empty();
      },
      seconds(60)))
      << Kubectl(cluster_, "-n " + ns_ + " get pods -o wide") << TrainerPids(ns_).size()
      << " trainer processes";
  // The Service and the rendezvous Secret stay with the finished job (for inspection) and go
  // with it: owner references, collected by the garbage collector.
  EXPECT_TRUE(client_->Get(resources::kServices, ns_, kJob).ok());
  auto live = client_->Get(api::kTrainingJobs, ns_, kJob);
  ASSERT_TRUE(live.ok());
  const std::string secret = tj::controller::SecretName(api::RefOf(*live));
  EXPECT_TRUE(client_->Get(resources::kSecrets, ns_, secret).ok()) << secret;
  ASSERT_TRUE(client_->Delete(api::kTrainingJobs, ns_, kJob).ok());
  EXPECT_TRUE(Eventually(
      [&] {
        return !client_->Get(resources::kServices, ns_, kJob).ok() &&
               !client_->Get(resources::kSecrets, ns_, secret).ok() && Pods(kJob).empty();
      },
      seconds(90)))
      << Kubectl(cluster_, "-n " + ns_ + " get all,secrets");
}

// --- Kills at full speed, at random moments ---

// The kill test's job: a chief and a worker (their templates apart, so that an OOM kill can
// aim at either), no evaluator, at full speed: 3 epochs of 200 steps, a backup every 10.
json FullSpeedJob() {
  json job = testing::ScaledExample(3, 200, 10);
  json& specs = job["spec"]["replicaSpecs"];
  specs.erase("Evaluator");
  specs["Chief"] = specs["Worker"];
  specs["Chief"]["replicas"] = 1;
  specs["Worker"]["replicas"] = 1;
  for (const char* t : {"Chief", "Worker"}) {
    // The trainer needs about 420 MiB: a fill of 2 GiB is an OOM kill under this limit.
    json& c = specs[t]["template"]["spec"]["containers"][0];
    c["resources"]["limits"]["memory"] = "1Gi";
    c["resources"]["requests"]["memory"] = "128Mi";
  }
  return job;
}

// The kill tests' random moments: the seed is printed; TJ_KILL_SEED=<seed> replays a run.
std::mt19937 KillRandom() { return testing::SeededRandom("TJ_KILL_SEED"); }
using testing::Uniform;

// The chief and then the worker are OOM-killed (gangs 0 and 1: a fill of 2 GiB at a random
// step, by the failpoint train.step, in that gang's process only), then each later gang's
// victim, in turn the worker and the chief, is SIGKILLed at a random moment after its chief's
// first backup of that gang: within the first 1/(kills + 2) of the job's training time
// (measured by the reference run), so that on any machine every kill lands while the gang
// trains, in a step, an all-reduce or a backup write. TJ_FAULT_KILLS kills in all (default 4;
// docs/reliability.md has a run of 12). The job must end Succeeded with one restart per kill
// and the final weights of the same job never killed: the resume is exact.
TEST_F(FaultWorkload, KilledAtRandomMomentsAtFullSpeedEndsWithTheReferenceWeights) {
  if (!testing::RealNode()) GTEST_SKIP() << "the OOM kills need the real node's memory limits";
  const char* env = std::getenv("TJ_FAULT_KILLS");
  const int kills = std::max(2, env != nullptr ? std::atoi(env) : 4);
  std::mt19937 rng = KillRandom();
  const json reference_job = FullSpeedJob();
  const std::string reference = JobTest::ReferenceSha(reference_job, kFinishTimeout);
  ASSERT_EQ(reference.size(), 64u);
  const std::vector<json> reference_end = PodEvents("reference-chief-0", "train_end");
  ASSERT_EQ(reference_end.size(), 1u);
  const double train_s = reference_end[0].value("train_seconds", 0.0);
  const int steps = 3 * 200;
  const int window_ms = std::clamp(static_cast<int>(train_s * 1000 / (kills + 2)), 20, 3000);
  const int window_steps = std::max(2, steps / (kills + 2));
  std::cerr << "reference: " << train_s << " s of training; kills within " << window_ms << " ms or "
            << window_steps << " steps of a gang's start\n";

  json job = FullSpeedJob();
  job["metadata"]["name"] = "killed";
  job["spec"]["runPolicy"]["backoffLimit"] = kills + 1;
  const std::string chief_oom =
      "train.step=fill:2048@" + std::to_string(Uniform(rng, 1, window_steps)) + "%0";
  const std::string worker_oom =
      "train.step=fill:2048@" + std::to_string(Uniform(rng, 1, window_steps)) + "%1";
  testing::SetEnv(job, "Chief", "TJ_FAILPOINTS", chief_oom);
  testing::SetEnv(job, "Worker", "TJ_FAILPOINTS", worker_oom);
  std::cerr << "gang 0: chief " << chief_oom << "; gang 1: worker " << worker_oom << "\n";
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  auto wait_restarts = [&](int n) {
    return Eventually(
        [&] {
          const auto st = StatusOf(Get("killed"));
          return st.restart_count >= n || st.Finished();
        },
        kFinishTimeout);
  };
  for (int gang = 0; gang < 2; ++gang) {
    ASSERT_TRUE(wait_restarts(gang + 1)) << PodLog("killed-chief-0");
    ASSERT_FALSE(StatusOf(Get("killed")).Finished()) << Get("killed").dump(2);
  }
  for (int gang = 2; gang < kills; ++gang) {
    const std::string victim = gang % 2 == 0 ? "killed-worker-0" : "killed-chief-0";
    ASSERT_TRUE(Eventually(
        [&] {
          return StatusOf(Get("killed")).Finished() ||
                 (TrainerPids(ns_, "killed-chief-0", gang).size() == 1 &&
                  TrainerPids(ns_, victim, gang).size() == 1 &&
                  !PodEvents("killed-chief-0", "backup_saved").empty());
        },
        kFinishTimeout))
        << PodLog("killed-chief-0");
    ASSERT_FALSE(StatusOf(Get("killed")).Finished()) << "ended before kill " << gang + 1 << "\n"
                                                     << Get("killed").dump(2);
    const int ms = Uniform(rng, 0, window_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    const std::vector<pid_t> pids = TrainerPids(ns_, victim, gang);
    ASSERT_EQ(pids.size(), 1u) << victim << " in gang " << gang;
    std::cerr << "gang " << gang << ": SIGKILL " << victim << " " << ms
              << " ms after the chief's first backup\n";
    ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
    ASSERT_TRUE(wait_restarts(gang + 1)) << PodLog("killed-chief-0");
    ASSERT_FALSE(StatusOf(Get("killed")).Finished()) << "ended at kill " << gang + 1 << "\n"
                                                     << Get("killed").dump(2);
  }
  const json done = WaitFinished("killed", kFinishTimeout);
  const auto s = StatusOf(done);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << done.dump(2) << PodLog("killed-chief-0");
  EXPECT_EQ(s.restart_count, kills) << done.dump(2);
  EXPECT_EQ(FinalWeightsSha(done), reference) << PodLog("killed-chief-0");
  const std::string restarts =
      Kubectl(cluster_, "-n " + ns_ +
                            " get events --field-selector "
                            "reason=GangRestart -o custom-columns=M:.message");
  EXPECT_NE(restarts.find("OOMKilled"), std::string::npos) << restarts;
  EXPECT_NE(restarts.find("(signal 9)"), std::string::npos) << restarts;
  std::cerr << restarts;
}

}  // namespace
}  // namespace tj::kube
