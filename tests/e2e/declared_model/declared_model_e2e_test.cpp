// Declared models under the operator, on the local cluster (process node): the job of
// manifests/examples/declared-model.yaml, scaled down, trains a Keras model file of
// examples/models/ mounted from a ConfigMap, on 2 workers and an evaluator, reading TFRecord
// shards of Fashion-MNIST fitted to the model's input. Worker 1 is killed mid-run; the gang
// restarts, resumes from the last backup, and the job Succeeds with the final weights of the
// same job run uninterrupted, and the evaluator evaluates the same model's checkpoints.
//
// The process node runs no init containers, so the test writes the dataset itself with
// tj-dataset, as the example's init containers do on a real node.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "operator/controller/job_resources.h"
#include "tests/e2e/support/e2e_support.h"
#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::PaceFailpoint;
using testing::SetArg;
using testing::SetEnv;
using testing::Sh;
namespace fs = std::filesystem;
using std::chrono::seconds;

const seconds kStartTimeout(240);
const seconds kFinishTimeout(600);
constexpr int kPaceMs = 300;  // each backup write held this long: the kill lands mid-run

struct ModelCase {
  const char* file;  // examples/models/<file>.json
  const char* size;  // --image-size
  const char* channels;
};

class DeclaredModelE2E : public testing::JobTest {
 protected:
  // The example's documents: {datasets claim, the job's claim, the TrainingJob}.
  static std::vector<json> Docs() {
    std::vector<json> out;
    const std::string path = std::string(TJ_SOURCE_DIR) + "/manifests/examples/declared-model.yaml";
    for (const auto& d : YAML::LoadAllFromFile(path)) {
      auto j = testing::YamlToJson(d);
      if (!j.ok()) throw std::runtime_error(path + ": " + j.status().message());
      out.push_back(std::move(*j));
    }
    return out;
  }

  // The datasets claim with Fashion-MNIST's first examples as TFRecord shards, written where
  // the process node keeps the claim.
  void WriteDataset() {
    ASSERT_TRUE(client_->Create(resources::kPersistentVolumeClaims, ns_, Docs().at(0)).ok());
    const std::string root = cluster_->dir() + "/node/pvc/" + ns_ + "/datasets/fmnist-tfrecord";
    fs::create_directories(root);
    const std::string tool = std::string(TJ_BIN_DIR) + "/tj-dataset convert --from " +
                             "idx:/usr/share/datasets/fashion-mnist --to tfrecord ";
    for (const auto& [split, args] :
         {std::pair{"train", "--shards 4 --limit 2048"}, std::pair{"test", "--limit 256"}}) {
      const std::string out = Sh(tool + "--split " + split + " " + args + " --out " + root + "/" +
                                 split + " 2>&1; echo rc=$?");
      ASSERT_NE(out.find("rc=0"), std::string::npos) << out;
    }
  }

  // The example's job for `model`: named after it, its own claim fmnist-data (made by the
  // fixture), the model's ConfigMap, 2 epochs of 8 steps of 32, a backup every 3 steps.
  json Job(const ModelCase& model, const std::string& name) {
    json cm = {
        {"apiVersion", "v1"},
        {"kind", "ConfigMap"},
        {"metadata", {{"name", name + "-model"}}},
        {"data",
         {{"model.json", ::tj::testing::ReadBytes(std::string(TJ_SOURCE_DIR) + "/examples/models/" +
                                                  model.file + ".json")}}}};
    EXPECT_TRUE(client_->Create(resources::kConfigMaps, ns_, cm).ok());
    json job = Docs().at(2);
    job["metadata"]["name"] = name;
    job["spec"]["runPolicy"].erase("ttlSecondsAfterFinished");
    for (const char* t : {"Worker", "Evaluator"}) {
      json& spec = job["spec"]["replicaSpecs"][t]["template"]["spec"];
      json& c = spec["containers"][0];
      SetArg(c["args"], "--epochs", "2");
      SetArg(c["args"], "--image-size", model.size);
      SetArg(c["args"], "--image-channels", model.channels);
      if (std::string(t) == "Worker") {
        SetArg(c["args"], "--steps-per-epoch", "8");
        SetArg(c["args"], "--batch-size", "32");
        SetArg(c["args"], "--save-freq", "3");
      } else {
        SetArg(c["args"], "--eval-poll-interval", "0.2");
      }
      c["resources"]["requests"]["cpu"] = "100m";
      for (json& v : spec["volumes"]) {
        if (v.value("name", "") == "data") v["persistentVolumeClaim"]["claimName"] = "fmnist-data";
        if (v.value("name", "") == "model") v["configMap"]["name"] = name + "-model";
      }
    }
    return job;
  }

  void TrainKillResume(const ModelCase& model, const std::string& name) {
    WriteDataset();
    if (HasFatalFailure()) return;
    json job = Job(model, name);
    const std::string reference = ReferenceSha(job, kFinishTimeout, {"datasets"});
    ASSERT_EQ(reference.size(), 64u);
    SetEnv(job, "Worker", "TJ_FAILPOINTS", PaceFailpoint(kPaceMs));
    ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
    const std::string chief = name + "-worker-0";
    ASSERT_TRUE(FirstBackup(chief, kStartTimeout).is_object());
    const auto model_events = PodEvents(chief, "model");
    ASSERT_FALSE(model_events.empty()) << PodLog(chief);
    EXPECT_EQ(model_events[0].value("model_config", ""), "/etc/tj-model/model.json");
    ASSERT_GT(SignalTrainer(name + "-worker-1", SIGKILL), 0);
    const json restored = WaitResumed(chief, 1, kFinishTimeout);
    ASSERT_TRUE(restored.is_object()) << PodLog(chief);
    ExpectSucceededWithReferenceWeights(name, chief, reference, 1, kFinishTimeout);
    const auto ends = PodEvents(chief, "train_end");
    ASSERT_FALSE(ends.empty());
    std::cerr << model.file << ": " << model_events[0].value("parameters", 0)
              << " parameters; gang 1 resumed from " << restored.dump() << "; final weights "
              << reference << " as the uninterrupted run's; test accuracy "
              << ends.back().value("test_accuracy", -1.0) << "\n";
    // The evaluator evaluated the same model's checkpoints, into the job's status.
    const json done = Get(name);
    EXPECT_TRUE(done["status"].contains("evaluation")) << done["status"].dump(2);
    const std::string evaluator_log = PodLog(name + "-evaluator-0");
    EXPECT_NE(evaluator_log.find(model_events[0].value("model_sha256", "?")), std::string::npos)
        << evaluator_log;
  }
};

TEST_F(DeclaredModelE2E, ResNet20TrainsResumesBitwiseAndIsEvaluated) {
  TrainKillResume({"resnet20", "32x32", "3"}, "resnet20");
}

TEST_F(DeclaredModelE2E, MobileNetV2TrainsResumesBitwiseAndIsEvaluated) {
  TrainKillResume({"mobilenet_v2", "32x32", "3"}, "mobilenet");
}

TEST_F(DeclaredModelE2E, SeedsCnnTrainsResumesBitwiseAndIsEvaluated) {
  TrainKillResume({"seeds_cnn", "28x28", "1"}, "seeds");
}

}  // namespace
}  // namespace tj::kube
