// The TrainingJob CRD as kubectl meets it on a real API server (hack/local-cluster.sh), with no
// operator: `kubectl explain` prints the description of every property the schema declares;
// a status as the operator writes it (TrainingJobStatus::ToJson) is stored as written, nothing
// pruned or refused; `kubectl wait --for=condition=Succeeded` returns once the Succeeded
// condition is True; `-o wide` shows Chief, Evaluator, Images/s and Last backup; the category
// is "training", not "all".
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/support/e2e_support.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::Eventually;
using testing::Kubectl;
using testing::LocalCluster;
using testing::NewNamespace;

const std::string kCrd = std::string(TJ_SOURCE_DIR) + "/manifests/crd/trainingjob.yaml";

// Runs of spaces, tabs and newlines as one space: kubectl explain wraps and indents.
std::string Squeeze(const std::string& s) { return std::regex_replace(s, std::regex("\\s+"), " "); }

// (path below the root, description) of every property kubectl explain can reach: arrays are
// transparent to it; values of maps (additionalProperties) and metadata (ObjectMeta, described
// by the API server itself) are not walked.
void Described(const YAML::Node& schema, const std::string& path,
               std::vector<std::pair<std::string, std::string>>* out) {
  const YAML::Node props = schema["type"].as<std::string>() == "array"
                               ? schema["items"]["properties"]
                               : schema["properties"];
  if (!props) return;
  for (const auto& p : props) {
    const std::string name = p.first.as<std::string>();
    if (path.empty() && name == "metadata") continue;
    const std::string sub = path.empty() ? name : path + "." + name;
    out->emplace_back(sub, p.second["description"].as<std::string>(""));
    Described(p.second, sub, out);
  }
}

class CrdApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TJ_REQUIRE_LOCAL_CLUSTER(cluster_);
    client_ = cluster_->NewClient();
    const std::string out = Kubectl(cluster_, "apply -f " + kCrd);
    ASSERT_TRUE(Eventually([&] { return client_->List(api::kTrainingJobs, "default").ok(); },
                           std::chrono::seconds(20)))
        << out;
  }

  // kubectl explain, once the API server publishes the CRD's schema (a few seconds after the
  // CRD is established).
  std::string Explain(const std::string& path) {
    std::string out;
    Eventually([&] {
      out = Kubectl(cluster_, "explain trainingjob." + path);
      return out.find("DESCRIPTION") != std::string::npos;
    });
    return out;
  }

  LocalCluster* cluster_ = nullptr;
  std::unique_ptr<RestClient> client_;
};

TEST_F(CrdApiTest, ExplainPrintsTheDescriptionOfEveryProperty) {
  // The field the documentation names, word for word.
  const std::string replicas = Explain("spec.replicaSpecs.Worker.replicas");
  EXPECT_NE(Squeeze(replicas).find("Number of worker pods, 1 to 512 (default 1)"),
            std::string::npos)
      << replicas;

  std::vector<std::pair<std::string, std::string>> props;
  Described(YAML::LoadFile(kCrd)["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "", &props);
  ASSERT_GT(props.size(), 50u);  // spec, status, and what is below them
  for (const auto& [path, description] : props) {
    ASSERT_FALSE(description.empty()) << path << " has no description";
    const std::string out = Explain(path);
    EXPECT_NE(Squeeze(out).find(Squeeze(description)), std::string::npos)
        << "kubectl explain trainingjob." << path << " does not print its description:\n"
        << out;
  }
}

TEST_F(CrdApiTest, WaitWideColumnsAndCategoryWithAStatusAsTheOperatorWritesIt) {
  const std::string ns = NewNamespace(client_.get(), "crd-api");
  json job = testing::ScaledExample(1, 1, 1);
  job["metadata"]["name"] = "columns";
  job["spec"]["replicaSpecs"]["Chief"] = job["spec"]["replicaSpecs"]["Worker"];
  job["spec"]["replicaSpecs"]["Chief"]["replicas"] = 1;
  job["spec"]["replicaSpecs"]["Worker"]["replicas"] = 2;
  auto created = client_->Create(api::kTrainingJobs, ns, job);
  ASSERT_TRUE(created.ok()) << created.status().message();

  // What a script runs right after kubectl apply: it must wait, not fail on the absent
  // condition, and return 0 once the job succeeds.
  std::string kubectl = testing::Sh("command -v kubectl");
  kubectl.erase(kubectl.find_last_not_of('\n') + 1);
  ::tj::testing::Subprocess wait({kubectl, "--kubeconfig", cluster_->kubeconfig(), "-n", ns, "wait",
                                  "--for=condition=Succeeded", "tj/columns", "--timeout=60s"},
                                 {}, cluster_->dir() + "/kubectl-wait-" + ns);
  EXPECT_FALSE(wait.Wait(std::chrono::seconds(2)).has_value()) << wait.Stdout() << wait.Stderr();

  // A running job's status, then a succeeded one, each written as the operator writes it.
  const auto t0 = std::chrono::system_clock::now();
  api::TrainingJobStatus s;
  s.observed_generation = (*created)["metadata"]["generation"].get<int64_t>();
  s.SetCondition(api::condition::kCreated, true, "JobCreated", "created the pods", t0);
  s.SetCondition(api::condition::kRunning, true, "JobRunning", "training", t0);
  s.replica_statuses["Worker"] = {2, 0, 0};
  s.progress = {{"epoch", 1},
                {"totalEpochs", 1},
                {"step", 1},
                {"loss", 0.5},
                {"accuracy", 0.75},
                {"imagesPerSecond", 812.5},
                {"lastBackup", {{"epoch", 1}, {"step", 1}}}};
  s.evaluation = {{"checkpoint", "ckpt-1"}, {"epoch", 1}, {"loss", 0.6}, {"accuracy", 0.7}};
  json object = *created;
  object["status"] = s.ToJson();
  auto written = client_->UpdateStatus(api::kTrainingJobs, ns, object);
  ASSERT_TRUE(written.ok()) << written.status().message();
  EXPECT_EQ((*written)["status"], s.ToJson()) << "the API server pruned or changed the status";
  EXPECT_FALSE(wait.Wait(std::chrono::seconds(2)).has_value()) << "returned while Running";

  s.SetCondition(api::condition::kSucceeded, true, "JobSucceeded", "the chief exited 0",
                 t0 + std::chrono::seconds(1));
  s.SetCondition(api::condition::kRunning, false, "JobSucceeded", "the chief exited 0",
                 t0 + std::chrono::seconds(1));
  object = *written;
  object["status"] = s.ToJson();
  written = client_->UpdateStatus(api::kTrainingJobs, ns, object);
  ASSERT_TRUE(written.ok()) << written.status().message();
  EXPECT_EQ((*written)["status"], s.ToJson());
  const auto code = wait.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value()) << "kubectl wait did not return";
  EXPECT_EQ(*code, 0) << wait.Stdout() << wait.Stderr();
  EXPECT_NE(wait.Stdout().find("condition met"), std::string::npos) << wait.Stdout();

  const std::string wide = Kubectl(cluster_, "-n " + ns + " get tj -o wide");
  EXPECT_TRUE(std::regex_search(wide, std::regex("CHIEF +EVALUATOR +IMAGES/S +LAST BACKUP")))
      << wide;
  EXPECT_TRUE(std::regex_search(wide, std::regex("columns +Succeeded +2 +1 .* 1 +1 +812.5 +1")))
      << wide;
  const std::string plain = Kubectl(cluster_, "-n " + ns + " get tj");
  EXPECT_EQ(plain.find("CHIEF"), std::string::npos) << plain;

  EXPECT_NE(Kubectl(cluster_, "-n " + ns + " get training").find("columns"), std::string::npos);
  const std::string all = Kubectl(cluster_, "-n " + ns + " get all");
  EXPECT_EQ(all.find("columns"), std::string::npos) << "kubectl get all lists training jobs:\n"
                                                    << all;
}

}  // namespace
}  // namespace tj::kube
