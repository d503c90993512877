// Real TensorFlow under the operator, on the real node: the programs of examples/tensorflow in
// the image localhost/tj-tensorflow (hack/images.sh build-tensorflow), as chief + 2 workers +
// evaluator, with Fashion-MNIST from the image and backups and checkpoints on the job's claim.
// The programs know nothing of the operator: TensorFlow reads TF_CONFIG, and the only addition
// is the optional tj_status callback, whose progress the test reads back from the job.
#include <gtest/gtest.h>
#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/e2e/support/e2e_support.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::StatusOf;
using testing::TrainerPids;

constexpr const char* kExamples = "/opt/tj/examples/tensorflow/";
// A TensorFlow process on a shared 2-core machine takes tens of seconds to import and meet
// its peers: generous bounds, never reached when things work.
constexpr std::chrono::seconds kJobTimeout{900};

// One replica type running `program` of the examples with `args`; tf-keras when `legacy`.
json Replica(int replicas, const std::string& program, const std::vector<std::string>& args,
             bool legacy, const std::string& restart_policy = "ExitCode") {
  json env = json::array({{{"name", "TF_CPP_MIN_LOG_LEVEL"}, {"value", "1"}}});
  if (legacy) env.push_back({{"name", "TF_USE_LEGACY_KERAS"}, {"value", "1"}});
  json container = {{"name", "tensorflow"},
                    {"image", testing::LocalImage("tj-tensorflow")},
                    {"command", json::array({"python", std::string(kExamples) + program})},
                    {"args", args},
                    {"env", env},
                    {"volumeMounts", json::array({{{"name", "data"}, {"mountPath", "/data"}}})}};
  return {{"replicas", replicas},
          {"restartPolicy", restart_policy},
          {"template",
           {{"spec",
             {{"terminationGracePeriodSeconds", 60},
              {"containers", json::array({container})},
              {"volumes",
               json::array({{{"name", "data"},
                             {"persistentVolumeClaim", {{"claimName", "fmnist-data"}}}}})}}}}}};
}

json Job(const std::string& name, json replica_specs) {
  return {{"apiVersion", "tjo.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"replicaSpecs", std::move(replica_specs)},
            // Every pod stays for the test to read its log.
            {"runPolicy", {{"backoffLimit", 3}, {"cleanPodPolicy", "None"}}}}}};
}

// manifests/examples/tensorflow-keras.yaml's job (keras_fit.py under tf-keras as chief + 2
// workers, the sidecar evaluator on its checkpoints), named `name`, on the fixture's claim,
// in its own directories of it, scaled down: 3 epochs of 20 steps, `extra` args for the
// trainers.
json KerasFitJob(const std::string& name, const std::vector<std::string>& extra = {}) {
  json job;
  for (const auto& d : YAML::LoadAllFromFile(std::string(TJ_SOURCE_DIR) +
                                             "/manifests/examples/tensorflow-keras.yaml")) {
    auto doc = testing::YamlToJson(d);
    if (!doc.ok()) {
      throw std::runtime_error("manifests/examples/tensorflow-keras.yaml: " +
                               doc.status().message());
    }
    if (doc->value("kind", "") == "TrainingJob") job = *doc;
  }
  job["metadata"]["name"] = name;
  job["spec"]["runPolicy"]["cleanPodPolicy"] = "None";  // the test reads every pod's log
  for (auto& [type, rs] : job["spec"]["replicaSpecs"].items()) {
    json& spec = rs["template"]["spec"];
    spec["volumes"][0]["persistentVolumeClaim"]["claimName"] = "fmnist-data";
    json& c = spec["containers"][0];
    c["image"] = testing::LocalImage("tj-tensorflow");
    c["resources"]["requests"]["cpu"] = "100m";  // a 2-core node
    json& args = c["args"];
    for (auto& a : args) {  // /data/x -> /data/<name>/x
      const std::string v = a.get<std::string>();
      if (v.rfind("/data/", 0) == 0) a = "/data/" + name + v.substr(5);
    }
    if (type == "Evaluator") continue;
    testing::SetArg(args, "--steps-per-epoch", "20");
    testing::SetArg(args, "--save-freq", "epoch");
    for (size_t i = 0; i + 1 < extra.size(); i += 2) testing::SetArg(args, extra[i], extra[i + 1]);
  }
  return job;
}

// custom_loop.py (Keras 3) as chief + 2 workers, and the sidecar evaluator on its checkpoints.
json CustomLoopJob(const std::string& name, const std::vector<std::string>& extra = {}) {
  const std::string dir = "/data/" + name;
  std::vector<std::string> args = {"--epochs",  "3", "--steps-per-epoch", "20",
                                   "--threads", "1", "--checkpoint-dir",  dir + "/ckpt"};
  args.insert(args.end(), extra.begin(), extra.end());
  return Job(name, {{"Chief", Replica(1, "custom_loop.py", args, false)},
                    {"Worker", Replica(2, "custom_loop.py", args, false)},
                    {"Evaluator", Replica(1, "sidecar_evaluator.py",
                                          {"--checkpoint-dir", dir + "/ckpt", "--epochs", "3"},
                                          false, "OnFailure")}});
}

// The kill tests' random moments: the seed is printed; TJ_TENSORFLOW_KILL_SEED=<seed> replays a
// run.
std::mt19937 KillRandom() { return testing::SeededRandom("TJ_TENSORFLOW_KILL_SEED"); }
using testing::Uniform;

// Gives the chief and the workers of `job` a memory limit and makes each kind OOM-killed once
// in the job's life: the chief after a random 5 to 25 steps of its process, one worker after
// another such number (--fill-memory-at-step; the file on the claim makes it once). The two
// differ, so the two OOM kills fall in two gangs: the first ends its gang (every step needs
// every replica), the second comes in the next. A backoffLimit of 8 leaves room for them
// and the SIGKILLs.
void AddOomKills(json& job, const std::string& dir, std::mt19937& rng) {
  job["spec"]["runPolicy"]["backoffLimit"] = 8;
  const int chief_step = Uniform(rng, 5, 25);
  int worker_step = Uniform(rng, 5, 24);
  if (worker_step >= chief_step) ++worker_step;
  for (const auto& [type, step] : {std::pair<std::string, int>{"Chief", chief_step},
                                   std::pair<std::string, int>{"Worker", worker_step}}) {
    json& c = job["spec"]["replicaSpecs"][type]["template"]["spec"]["containers"][0];
    c["resources"]["limits"]["memory"] = "2Gi";      // the program uses about 0.5 GiB
    c["resources"]["requests"]["memory"] = "256Mi";  // else the limit: 3 x 2Gi on one node
    testing::SetArg(c["args"], "--fill-memory-at-step", std::to_string(step));
    testing::SetArg(c["args"], "--fill-memory-once", dir + "/oom-" + type);
  }
}

class TensorFlowE2E : public testing::JobTest {
 protected:
  void SetUp() override {
    if (!testing::RealNode()) GTEST_SKIP() << "TensorFlow runs on the real node only";
    const std::string image = testing::LocalImage("tj-tensorflow");
    const std::string found = testing::Sh("podman image exists " + image + " && echo yes");
    if (found.find("yes") == std::string::npos) {
      const std::string why = "no image " + image + " (make images-tensorflow)";
      if (ClusterRequired()) FAIL() << why;
      GTEST_SKIP() << why;
    }
    JobTest::SetUp();
  }

  static bool ClusterRequired() { return ::tj::kube::testing::ClusterRequired(); }

  // The program's JSON lines (fmnist_setup.log) in a pod's log, of `event`.
  std::vector<json> Events(const std::string& pod, const std::string& event) {
    std::vector<json> out;
    for (const json& e : PodEvents(pod)) {
      if (e.value("event", "") == event) out.push_back(e);
    }
    return out;
  }

  // Sends `sig` to the python process of `pod` in gang `gang`; false when there is not
  // exactly one.
  bool SignalPython(const std::string& pod, int gang, int sig) {
    std::vector<pid_t> pids = TrainerPids(ns_, pod, gang, "python");
    if (pids.size() != 1) {
      ADD_FAILURE() << pids.size() << " python processes of " << pod << " in gang " << gang;
      return false;
    }
    return ::kill(pids[0], sig) == 0;
  }

  // Waits until the job has restarted `gang` times and the chief of that gang has run its
  // first step (its python process is gang `gang`'s, so its log is that gang's alone).
  bool WaitTraining(const std::string& job, const std::string& chief, int gang) {
    return testing::Eventually(
        [&] {
          if (StatusOf(Get(job)).restart_count < gang) return false;
          if (TrainerPids(ns_, chief, gang, "python").size() != 1) return false;
          return !Events(chief, "first_step").empty();
        },
        kJobTimeout);
  }

  // Waits until job `job` has restarted at least `restarts` times.
  bool WaitRestarts(const std::string& job, int restarts) {
    return testing::Eventually(
        [&] {
          json j = Get(job);
          return StatusOf(j).restart_count >= restarts || StatusOf(j).Finished();
        },
        kJobTimeout);
  }

  // The kill tests: gangs 0 and 1 end in the OOM kills AddOomKills set up; each later gang in
  // a SIGKILL of the next of `victims`, at a random moment 0 to 3 s after its chief's first
  // step. The program runs at full speed (no --step-delay): the kill lands wherever it lands,
  // in a step, an all-reduce, a backup or a checkpoint. Then the job must succeed with one
  // gang restart per kill; with `expect_resumed`, its last gang resumed from a backup (a
  // program that saves only at epochs' ends may never have finished one before the last).
  void KillAtRandomMoments(const std::string& job, const std::vector<std::string>& victims,
                           std::mt19937& rng, bool expect_resumed) {
    const std::string chief = job + "-chief-0";
    for (int gang = 0; gang < 2; ++gang) {
      ASSERT_TRUE(WaitRestarts(job, gang + 1)) << PodLog(chief);
      ASSERT_FALSE(StatusOf(Get(job)).Finished()) << "ended before OOM kill " << gang + 1 << ":\n"
                                                  << Get(job).dump(2);
    }
    int gang = 2;
    for (const std::string& victim : victims) {
      ASSERT_TRUE(WaitTraining(job, chief, gang)) << PodLog(chief);
      const int ms = Uniform(rng, 0, 3000);
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      std::cerr << "gang " << gang << ": SIGKILL " << victim << " " << ms
                << " ms after the chief's first step\n";
      ASSERT_TRUE(SignalPython(job + "-" + victim, gang, SIGKILL));
      ASSERT_TRUE(WaitRestarts(job, ++gang)) << PodLog(chief);
    }
    json j = WaitFinished(job, kJobTimeout);
    auto s = StatusOf(j);
    ASSERT_TRUE(s.IsTrue("Succeeded")) << j.dump(2) << PodLog(chief);
    EXPECT_EQ(s.restart_count, gang) << j.dump(2);
    // The last gang resumed where a backup or checkpoint left off, not from the start.
    std::vector<json> first = Events(chief, "first_step");
    ASSERT_EQ(first.size(), 1u) << PodLog(chief);
    std::cerr << "the last gang started at " << first[0] << "\n";
    if (!expect_resumed) return;
    EXPECT_TRUE(first[0]["epoch"].get<int>() > 1 || first[0]["step"].get<int>() > 0) << first[0];
  }
};

// Keras model.fit under MultiWorkerMirroredStrategy (tf-keras) with BackupAndRestore,
// ModelCheckpoint, TensorBoard and the tj_status callback; the evaluator follows the
// checkpoints. `kubectl get tj` shows the chief's epoch while it trains, and the job's
// status the callback's loss, accuracy and images/s.
TEST_F(TensorFlowE2E, KerasFitWithEvaluatorSucceedsAndReportsProgress) {
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, KerasFitJob("kfit")).ok());
  json progress;
  std::string get_tj;
  ASSERT_TRUE(testing::Eventually(
      [&] {
        json job = Get("kfit");
        if (StatusOf(job).Finished()) return true;
        const json status = job.is_object() ? job.value("status", json()) : json();
        const json p = status.is_object() ? status.value("progress", json()) : json();
        if (p.is_object() && p.value("epoch", 0) >= 2 && p.contains("loss")) {
          progress = p;
          get_tj = testing::Kubectl(cluster_, "-n " + ns_ + " get tj kfit -o wide");
          return true;
        }
        return false;
      },
      kJobTimeout))
      << PodLog("kfit-chief-0");
  json job = WaitFinished("kfit", kJobTimeout);
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2) << PodLog("kfit-chief-0");
  EXPECT_EQ(s.restart_count, 0);

  // The callback's document reached the job while it trained.
  ASSERT_TRUE(progress.is_object()) << "no progress seen before the job ended:\n"
                                    << job["status"].dump(2);
  EXPECT_EQ(progress.value("totalEpochs", 0), 3) << progress.dump();
  EXPECT_GT(progress.value("loss", 0.0), 0.0) << progress.dump();
  EXPECT_GT(progress.value("accuracy", 0.0), 0.1) << progress.dump();
  EXPECT_GT(progress.value("imagesPerSecond", 0.0), 0.0) << progress.dump();
  // kubectl's columns (the CRD's printer columns; an empty one is blanks): the job's row shows
  // the callback's epoch and images/s under the header's EPOCH and IMAGES/S.
  std::cerr << "kubectl get tj while training:\n" << get_tj;
  std::istringstream lines(get_tj);
  std::string header, row;
  std::getline(lines, header);
  while (std::getline(lines, row) && row.rfind("kfit ", 0) != 0) {
  }
  auto column = [&](const std::string& name) -> std::string {
    const size_t at = header.find(name);
    if (at == std::string::npos || at >= row.size() || row[at] == ' ') return "";
    std::istringstream word(row.substr(at));
    std::string w;
    word >> w;
    return w;
  };
  EXPECT_GE(std::strtol(column("EPOCH").c_str(), nullptr, 10), 2) << get_tj;
  EXPECT_GT(std::strtod(column("IMAGES/S").c_str(), nullptr), 0.0) << get_tj;

  for (const char* pod : {"kfit-chief-0", "kfit-worker-0", "kfit-worker-1"}) {
    std::vector<json> start = Events(pod, "start");
    ASSERT_EQ(start.size(), 1u) << PodLog(pod);
    EXPECT_EQ(start[0]["workers"], 3) << PodLog(pod);
    EXPECT_EQ(start[0]["keras"].get<std::string>().rfind("tf-keras", 0), 0u) << start[0];
    std::vector<json> end = Events(pod, "train_end");
    ASSERT_EQ(end.size(), 1u) << PodLog(pod);
    EXPECT_EQ(end[0]["epochs_run"], 3);
    EXPECT_GT(end[0]["test_accuracy"].get<double>(), 0.6) << end[0];
  }
  // The evaluator saw the last epoch's checkpoint.
  std::vector<json> evals = Events("kfit-evaluator-0", "evaluation");
  ASSERT_FALSE(evals.empty()) << PodLog("kfit-evaluator-0");
  EXPECT_EQ(evals.back()["epoch"], 3) << PodLog("kfit-evaluator-0");
  EXPECT_EQ(Events("kfit-evaluator-0", "evaluator_end").size(), 1u) << PodLog("kfit-evaluator-0");
  // The operator polled the evaluator's /status (tj_status.StatusServer) at least once.
  EXPECT_GE(job["status"].value("evaluation", json::object()).value("epoch", 0), 1)
      << job["status"].dump(2);
}

// A custom training loop (Keras 3 layers and optimizer, tf.function, strategy.run) with
// tf.train.CheckpointManager; the evaluator follows those checkpoints.
TEST_F(TensorFlowE2E, CustomLoopWithEvaluatorSucceeds) {
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, CustomLoopJob("loop")).ok());
  json job = WaitFinished("loop", kJobTimeout);
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2) << PodLog("loop-chief-0");
  EXPECT_EQ(s.restart_count, 0);
  for (const char* pod : {"loop-chief-0", "loop-worker-0", "loop-worker-1"}) {
    std::vector<json> start = Events(pod, "start");
    ASSERT_EQ(start.size(), 1u) << PodLog(pod);
    EXPECT_EQ(start[0]["keras"].get<std::string>().rfind("keras 3", 0), 0u) << start[0];
    EXPECT_EQ(Events(pod, "epoch_end").size(), 3u) << PodLog(pod);
    std::vector<json> end = Events(pod, "train_end");
    ASSERT_EQ(end.size(), 1u) << PodLog(pod);
    EXPECT_GT(end[0]["test_accuracy"].get<double>(), 0.6) << end[0];
  }
  std::vector<json> evals = Events("loop-evaluator-0", "evaluation");
  ASSERT_FALSE(evals.empty()) << PodLog("loop-evaluator-0");
  EXPECT_EQ(evals.back()["epoch"], 3) << PodLog("loop-evaluator-0");
}

// Keras fit (tf-keras, BackupAndRestore every 5 steps) killed 6 times at random moments: the
// chief and then a worker OOM-killed (or the other way round), then SIGKILLs of the chief,
// worker 1, worker 0 and the chief. The survivors of each kill exit 1 (TensorFlow's "peer
// lost"); the operator takes the first failure as the cause and restarts the gang.
TEST_F(TensorFlowE2E, KerasFitKilledAtRandomMomentsRestartsAndSucceeds) {
  std::mt19937 rng = KillRandom();
  // 3 epochs of 100 steps: more than the 6 gangs can run before their kills (2 OOM kills by
  // step 25, 4 SIGKILLs at most 3 s into a gang), so every kill lands while it trains.
  json job = KerasFitJob("kkill", {"--steps-per-epoch", "100", "--save-freq", "5"});
  AddOomKills(job, "/data/kkill", rng);
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  KillAtRandomMoments("kkill", {"chief-0", "worker-1", "worker-0", "chief-0"}, rng, true);
  std::vector<json> end = Events("kkill-chief-0", "train_end");
  ASSERT_EQ(end.size(), 1u) << PodLog("kkill-chief-0");
  EXPECT_GT(end[0]["test_accuracy"].get<double>(), 0.6) << end[0];
}

// The custom loop (Keras 3, a checkpoint at each epoch's end) killed 5 times at random
// moments: an OOM kill of the chief and of a worker, then SIGKILLs of worker 0, the chief and
// worker 1. Each gang restores the newest epoch checkpoint.
TEST_F(TensorFlowE2E, CustomLoopKilledAtRandomMomentsRestartsAndSucceeds) {
  std::mt19937 rng = KillRandom();
  // Epochs of 100 steps, as for keras_fit: no gang before the last can finish the job.
  json job = CustomLoopJob("lkill", {"--steps-per-epoch", "100"});
  AddOomKills(job, "/data/lkill", rng);
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  KillAtRandomMoments("lkill", {"worker-0", "chief-0", "worker-1"}, rng, false);
  EXPECT_EQ(Events("lkill-chief-0", "train_end").size(), 1u) << PodLog("lkill-chief-0");
}

// SIGTERM to one worker (an eviction) of the custom loop: PreemptionCheckpointHandler makes
// every worker save at the same step and exit 143; the gang restarts and restores that
// checkpoint, mid-epoch, and the job succeeds.
TEST_F(TensorFlowE2E, SigtermedWorkerSavesThenTheGangResumesFromThatStep) {
  // Full speed; epochs of 60 steps, so the SIGTERM 3 s after epoch 1's end lands inside
  // epoch 2 (the assertions below need a step inside it).
  ASSERT_TRUE(
      client_->Create(api::kTrainingJobs, ns_, CustomLoopJob("lterm", {"--steps-per-epoch", "60"}))
          .ok());
  ASSERT_TRUE(WaitForPodLog("lterm-chief-0", "\"epoch_end\"", kJobTimeout))
      << PodLog("lterm-chief-0");
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ASSERT_TRUE(SignalPython("lterm-worker-1", 0, SIGTERM));
  json job = WaitFinished("lterm", kJobTimeout);
  auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2) << PodLog("lterm-chief-0");
  EXPECT_EQ(s.restart_count, 1) << job.dump(2);
  std::vector<json> restored = Events("lterm-chief-0", "restored");
  ASSERT_EQ(restored.size(), 1u) << PodLog("lterm-chief-0");
  EXPECT_EQ(restored[0]["epoch"], 1) << restored[0];
  EXPECT_GT(restored[0]["step_in_epoch"].get<int>(), 0) << restored[0];
  EXPECT_EQ(Events("lterm-chief-0", "epoch_end").size(), 2u) << PodLog("lterm-chief-0");
}

}  // namespace
}  // namespace tj::kube
