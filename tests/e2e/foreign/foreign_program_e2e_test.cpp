// TrainingJobs whose containers run a user's own program, not tj-trainer: tf_program.py parses
// its arguments strictly (argparse: an unknown flag exits 2), reads TF_CONFIG as TensorFlow does
// and meets its peers over TCP through the hostnames TF_CONFIG names. The operator must pass
// what a replica needs through the environment only, find the container as TFJob does (named
// "tensorflow") and treat the program's exits as it treats tj-trainer's.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "operator/api/yaml_json.h"
#include "tests/e2e/support/e2e_support.h"
#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::StatusOf;
using testing::TrainerPids;

// On a real node the program runs from its image (tests/e2e/foreign/Containerfile); on the
// process node from the source tree, whatever the image is called.
json Replica(int replicas, const std::vector<std::string>& args) {
  json container = {{"name", "tensorflow"},
                    {"image", "example.com/team/mnist-tf:2.15"},
                    {"command", json::array({"python3", TJ_FOREIGN_PROGRAM})},
                    {"args", args}};
  if (testing::RealNode()) {
    container["image"] = testing::LocalImage("tj-test-python");
    container["command"] = json::array({"python3", "/opt/tj/tf_program.py"});
  }
  return {{"replicas", replicas},
          {"restartPolicy", "ExitCode"},
          {"template", {{"spec", {{"containers", json::array({container})}}}}}};
}

// Chief + 2 workers + an evaluator, each running tf_program.py with `args` (+ `extra` for the
// workers).
json ForeignJob(const std::string& name, const std::vector<std::string>& args,
                const std::vector<std::string>& worker_extra = {}) {
  std::vector<std::string> worker_args = args;
  worker_args.insert(worker_args.end(), worker_extra.begin(), worker_extra.end());
  return {{"apiVersion", "tjo.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"replicaSpecs",
             {{"Chief", Replica(1, args)},
              {"Worker", Replica(2, worker_args)},
              {"Evaluator", Replica(1, {"--steps", "2"})}}},
            // Every pod stays for the test to read its log (a real node's logs go with the pod).
            {"runPolicy", {{"backoffLimit", 2}, {"cleanPodPolicy", "None"}}}}}};
}

class ForeignProgramE2E : public testing::JobTest {
 protected:
  // The argv the program printed at its start (its first "args" line).
  json ArgvOf(const std::string& pod) {
    for (const json& e : PodEvents(pod, "args")) return e["argv"];
    return nullptr;
  }
};

TEST_F(ForeignProgramE2E, ChiefWorkersAndEvaluatorSucceedWithArgsUntouched) {
  const std::vector<std::string> args = {"--steps", "20", "--serve-status"};
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, ForeignJob("byo", args)).ok());
  json job = WaitFinished("byo", std::chrono::seconds(120));
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2);
  EXPECT_EQ(s.restart_count, 0);
  for (const char* pod : {"byo-chief-0", "byo-worker-0", "byo-worker-1"}) {
    EXPECT_EQ(ArgvOf(pod), json(args)) << pod << ":\n" << PodLog(pod);
    EXPECT_EQ(PodEvents(pod, "rendezvous_done").size(), 1u) << pod << ":\n" << PodLog(pod);
  }
  EXPECT_EQ(ArgvOf("byo-evaluator-0"), json::array({"--steps", "2"}));
}

TEST_F(ForeignProgramE2E, KilledWorkerRestartsTheGangThenSucceeds) {
  ASSERT_TRUE(client_
                  ->Create(api::kTrainingJobs, ns_,
                           ForeignJob("killed", {"--steps", "10", "--hang-on-first-gang"}))
                  .ok());
  ASSERT_TRUE(WaitForPodLog("killed-worker-1", "rendezvous_done", std::chrono::seconds(60)))
      << PodLog("killed-worker-1");
  std::vector<pid_t> pids = TrainerPids(ns_, "killed-worker-1", 0, "python3");
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
  json job = WaitFinished("killed", std::chrono::seconds(120));
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2);
  EXPECT_EQ(s.restart_count, 1) << job.dump(2);
}

// The program in --collective mode, as a TensorFlow program behaves on a peer's loss: the
// survivors exit 1. Chief + 2 workers, 400 steps of 10 ms (the steps' sleep, not the
// machine's speed, sets how long a gang trains: 4 s at least), killed once per gang at random
// moments: the chief OOM-killed at a random step of gang 0 (200 MiB written under a 96Mi
// limit), both workers at a random step of gang 1, then SIGKILLs of worker 1 and of the
// chief, each 0 to 2 s after the gang formed. Under restartPolicy ExitCode every kill must
// restart the gang (the survivors' exit 1 are its consequences) and the job must succeed.
TEST_F(ForeignProgramE2E, KilledAtRandomMomentsRestartsAndSucceeds) {
  if (!testing::RealNode()) GTEST_SKIP() << "the OOM kills need the real node's memory limits";
  std::mt19937 rng = testing::SeededRandom("TJ_KILL_SEED");
  const std::vector<std::string> base = {
      "--steps", "400", "--step-seconds", "0.01", "--collective", "--fill-mib", "200"};
  json job = ForeignJob("rkill", base);
  job["spec"]["replicaSpecs"].erase("Evaluator");
  job["spec"]["runPolicy"]["backoffLimit"] = 5;
  const std::pair<const char*, int> ooms[] = {{"Chief", 0}, {"Worker", 1}};
  for (const auto& [type, gang] : ooms) {
    json& c = job["spec"]["replicaSpecs"][type]["template"]["spec"]["containers"][0];
    for (const std::string& a :
         {std::string("--fill-at-step"), std::to_string(testing::Uniform(rng, 1, 300)),
          std::string("--fill-gang"), std::to_string(gang)}) {
      c["args"].push_back(a);
    }
    c["resources"]["limits"]["memory"] = "96Mi";  // the program needs about 25 MiB
    std::cerr << type << " OOM-killed in gang " << gang << ": " << c["args"].dump() << "\n";
  }
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  auto restarted = [&](int n) {
    return testing::Eventually(
        [&] {
          const auto st = StatusOf(Get("rkill"));
          return st.restart_count >= n || st.Finished();
        },
        std::chrono::seconds(180));
  };
  for (int gang = 0; gang < 2; ++gang) {
    ASSERT_TRUE(restarted(gang + 1)) << Get("rkill").dump(2);
    ASSERT_FALSE(StatusOf(Get("rkill")).Finished()) << Get("rkill").dump(2);
  }
  int gang = 2;
  for (const char* victim : {"rkill-worker-1", "rkill-chief-0"}) {
    ASSERT_TRUE(testing::Eventually(
        [&] {
          return TrainerPids(ns_, victim, gang, "python3").size() == 1 &&
                 !PodEvents("rkill-chief-0", "rendezvous_done").empty();
        },
        std::chrono::seconds(180)))
        << Get("rkill").dump(2);
    const int ms = testing::Uniform(rng, 0, 2000);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    std::vector<pid_t> pids = TrainerPids(ns_, victim, gang, "python3");
    ASSERT_EQ(pids.size(), 1u) << victim;
    std::cerr << "gang " << gang << ": SIGKILL " << victim << " " << ms << " ms after forming\n";
    ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
    ASSERT_TRUE(restarted(++gang)) << Get("rkill").dump(2);
    ASSERT_FALSE(StatusOf(Get("rkill")).Finished()) << Get("rkill").dump(2);
  }
  json done = WaitFinished("rkill", std::chrono::seconds(180));
  auto s = StatusOf(done);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << done.dump(2);
  EXPECT_EQ(s.restart_count, 4) << done.dump(2);
  const std::string restarts = testing::Kubectl(
      cluster_,
      "-n " + ns_ + " get events --field-selector reason=GangRestart -o custom-columns=M:.message");
  EXPECT_NE(restarts.find("OOMKilled"), std::string::npos) << restarts;
  EXPECT_NE(restarts.find("(signal 9)"), std::string::npos) << restarts;
  EXPECT_NE(restarts.find("exited with code 1"), std::string::npos) << restarts;  // survivors
  std::cerr << restarts;
}

// A TFJob manifest as Kubeflow's documentation writes one (tests/unit/operator/api/testdata:
// chief, workers, evaluator, runPolicy with a schedulingPolicy, successPolicy AllWorkers), its
// image and command swapped for this test's program, through `tj-operator convert` and
// kubectl apply: Succeeded.
TEST_F(ForeignProgramE2E, TfJobManifestConvertedRunsToSucceeded) {
  auto docs = api::ParseManifests(::tj::testing::ReadBytes(
      std::string(TJ_SOURCE_DIR) + "/tests/unit/operator/api/testdata/tfjob-mnist.yaml"));
  ASSERT_TRUE(docs.ok() && docs->size() == 1);
  json tfjob = docs->front();
  tfjob["metadata"].erase("namespace");  // this test's
  const std::vector<std::string> args = {"--steps", "10", "--serve-status"};
  for (auto& [type, rs] : tfjob["spec"]["tfReplicaSpecs"].items()) {
    json& c = rs["template"]["spec"]["containers"][0];
    const json program =
        Replica(1, type == "Evaluator" ? std::vector<std::string>{"--steps", "2"}
                                       : args)["template"]["spec"]["containers"][0];
    for (const char* k : {"image", "command", "args"}) c[k] = program[k];
  }
  const std::string file = cluster_->dir() + "/tfjob-" + ns_ + ".json";
  ASSERT_TRUE(::tj::testing::WriteBytes(file, tfjob.dump()));
  const std::string converted = file + ".converted";
  // The TrainingJob on stdout, the notes on stderr.
  const std::string notes =
      testing::Sh(std::string(TJ_BIN_DIR) + "/tj-operator convert -f " + file + " > " + converted +
                  " 2> " + file + ".notes; cat " + file + ".notes");
  // TFJob's minAvailable counts the evaluator; a TrainingJob's gang is the chief and workers.
  EXPECT_NE(notes.find("spec.runPolicy.schedulingPolicy.minAvailable 4 became 3"),
            std::string::npos)
      << notes;
  const std::string applied = testing::Kubectl(cluster_, "-n " + ns_ + " apply -f " + converted);
  ASSERT_NE(applied.find("trainingjob.tjo.dev/mnist-mwms created"), std::string::npos)
      << applied << notes;
  json job = WaitFinished("mnist-mwms", std::chrono::seconds(120));
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2);
  EXPECT_EQ(job["spec"]["successPolicy"], "AllWorkers");
  EXPECT_EQ(job["spec"]["replicaSpecs"]["Evaluator"]["restartPolicy"], "Never");
  EXPECT_EQ(PodEvents("mnist-mwms-chief-0", "rendezvous_done").size(), 1u)
      << PodLog("mnist-mwms-chief-0");
}

TEST_F(ForeignProgramE2E, ExitOneFailsTheJobWithTheCode) {
  // The chief and the workers exit 1 once they have met: a failure no restart fixes.
  json job = ForeignJob("exit1", {"--steps", "1", "--exit-code", "1"});
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  job = WaitFinished("exit1", std::chrono::seconds(120));
  ExpectFailedWithExitCode(job, 1);
}

// The peak resident memory of process `pid` in KiB (VmHWM), 0 when it cannot be read.
long PeakRssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

// A tenant's program answers the operator's /status polls with what a hostile one can send (an
// endless body, a body nested 10,000 deep, bytes that are not HTTP, a body that stops coming:
// tf_program.py --hostile-status), beside a job that serves the documented /status. The
// operator stays up and under the chart's memory limit (128 MiB), copies nothing of those
// answers into the job's status, and the other job succeeds as usual.
TEST_F(ForeignProgramE2E, HostileStatusAnswersHurtNeitherTheOperatorNorAnotherJob) {
  const pid_t op = op_->pid();
  ASSERT_GT(op, 0);
  ASSERT_TRUE(client_
                  ->Create(api::kTrainingJobs, ns_,
                           ForeignJob("hostile", {"--steps", "150", "--step-seconds", "0.1",
                                                  "--hostile-status"}))
                  .ok());
  ASSERT_TRUE(
      client_
          ->Create(api::kTrainingJobs, ns_, ForeignJob("calm", {"--steps", "40", "--serve-status"}))
          .ok());
  json calm = WaitFinished("calm", std::chrono::seconds(120));
  EXPECT_TRUE(StatusOf(calm).IsTrue("Succeeded")) << calm.dump(2);
  json hostile = WaitFinished("hostile", std::chrono::seconds(120));
  EXPECT_TRUE(StatusOf(hostile).IsTrue("Succeeded")) << hostile.dump(2);
  EXPECT_EQ(StatusOf(hostile).restart_count, 0);
  // Nothing of the answers reached the status (the final progress comes from the chief's
  // log, which this program does not write in the trainer's format).
  EXPECT_FALSE(hostile["status"].contains("progress")) << hostile["status"].dump(2);

  std::map<std::string, int> served;
  for (const json& e : PodEvents("hostile-chief-0", "hostile_served")) ++served[e["answer"]];
  for (const char* answer : {"endless", "deep", "garbage", "slowloris"}) {
    EXPECT_GE(served[answer], 1) << answer << " was never asked for:\n"
                                 << PodLog("hostile-chief-0");
  }
  EXPECT_EQ(::kill(op, 0), 0) << "the operator is gone:\n" << op_->Log();
  const long peak_kib = PeakRssKib(op);
  EXPECT_GT(peak_kib, 0);
  EXPECT_LT(peak_kib, 128 * 1024) << "the operator's peak RSS";
  std::cerr << "hostile /status: " << PodEvents("hostile-chief-0", "hostile_served").size()
            << " answers served (endless " << served["endless"] << ", deep " << served["deep"]
            << ", garbage " << served["garbage"] << ", slowloris " << served["slowloris"]
            << "); operator peak RSS " << peak_kib / 1024 << " MiB\n";
}

}  // namespace
}  // namespace tj::kube
