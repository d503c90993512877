// tj-operator convert: TFJob manifests as Kubeflow's documentation writes them (testdata/)
// become TrainingJobs that validate, with every field carried over or named in a note, and
// the ones that cannot run here refused with what to do instead.
#include "operator/api/tfjob_convert.h"

#include <gtest/gtest.h>

#include <functional>
#include <utility>
#include <vector>

#include "operator/api/training_job.h"
#include "operator/api/yaml_json.h"
#include "tests/support/temp_dir.h"

namespace tj::api {
namespace {

using nlohmann::json;

json Load(const std::string& name) {
  auto docs = ParseManifests(tj::testing::ReadBytes(std::string(TJ_SOURCE_DIR) +
                                                    "/tests/unit/operator/api/testdata/" + name));
  EXPECT_TRUE(docs.ok() && docs->size() == 1) << name;
  return docs.ok() && !docs->empty() ? docs->front() : json();
}

bool HasNote(const TfJobConversion& c, const std::string& part) {
  for (const auto& n : c.notes) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(ConvertTfJob, KubeflowStyleMwmsJobBecomesAValidTrainingJob) {
  const json tfjob = Load("tfjob-mnist.yaml");
  auto c = ConvertTfJob(tfjob);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const json& tj = c->training_job;
  EXPECT_EQ(tj["apiVersion"], "tjo.dev/v1alpha1");
  EXPECT_EQ(tj["kind"], "TrainingJob");
  EXPECT_EQ(tj["metadata"], tfjob["metadata"]);
  const json& rs = tj["spec"]["replicaSpecs"];
  for (const char* t : {"Chief", "Worker", "Evaluator"}) {
    EXPECT_EQ(rs[t]["template"], tfjob["spec"]["tfReplicaSpecs"][t]["template"]) << t;
    EXPECT_EQ(rs[t].value("replicas", json(1)), tfjob["spec"]["tfReplicaSpecs"][t]["replicas"]);
  }
  EXPECT_EQ(rs["Chief"]["restartPolicy"], "OnFailure");
  EXPECT_EQ(rs["Evaluator"]["restartPolicy"], "Never");  // TFJob's default, kept
  EXPECT_EQ(tj["spec"]["runPolicy"], json({{"cleanPodPolicy", "None"},
                                           {"backoffLimit", 2},
                                           {"ttlSecondsAfterFinished", 600},
                                           {"schedulingPolicy", {{"minAvailable", 3}}}}));
  EXPECT_EQ(tj["spec"]["successPolicy"], "AllWorkers");
  // TFJob's 4 counts the evaluator, which is not in TrainingJob's gang.
  EXPECT_TRUE(HasNote(*c, "spec.runPolicy.schedulingPolicy.minAvailable 4 became 3"));
  EXPECT_TRUE(HasNote(*c, "replicaSpecs.Evaluator.restartPolicy set to Never"));
  EXPECT_EQ(c->notes.size(), 2u);
  auto spec = ParseSpec(tj["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->Replicas(ReplicaType::kWorker), 2);
  EXPECT_EQ(spec->run_policy.clean_pod_policy, CleanPodPolicy::kNone);
}

TEST(ConvertTfJob, ParameterServersAreRefusedWithWhatToDo) {
  auto c = ConvertTfJob(Load("tfjob-ps.yaml"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("spec.tfReplicaSpecs.PS: parameter servers"),
            std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("MultiWorkerMirroredStrategy"), std::string::npos);
}

TEST(ConvertTfJob, MasterBecomesChiefAndSpecLevelOptionsMoveToRunPolicy) {
  json tfjob = Load("tfjob-ps.yaml");
  json& specs = tfjob["spec"]["tfReplicaSpecs"];
  specs["Master"] = specs["PS"];
  specs.erase("PS");
  auto c = ConvertTfJob(tfjob);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->training_job["spec"]["replicaSpecs"].contains("Chief"));
  EXPECT_FALSE(c->training_job["spec"]["replicaSpecs"].contains("Master"));
  EXPECT_TRUE(HasNote(*c, "spec.tfReplicaSpecs.Master became replicaSpecs.Chief"));
  EXPECT_EQ(c->training_job["spec"]["runPolicy"]["cleanPodPolicy"], "Running");
  specs["Chief"] = specs["Master"];
  auto both = ConvertTfJob(tfjob);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("both Master and Chief"), std::string::npos);
}

TEST(ConvertTfJob, WhatIsNotAV1TfJobIsRefusedNamingTheField) {
  json tfjob = Load("tfjob-mnist.yaml");
  tfjob["apiVersion"] = "kubeflow.org/v1beta2";
  auto c = ConvertTfJob(tfjob);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message().rfind("apiVersion: ", 0), 0u) << c.status().message();
  tfjob["kind"] = "PyTorchJob";
  c = ConvertTfJob(tfjob);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message().rfind("kind: ", 0), 0u) << c.status().message();
}

// A manifest is a user's file: a field of the wrong type is an error naming it, never an
// exception (tj-operator convert ended with std::terminate on each of these).
TEST(ConvertTfJob, AFieldOfTheWrongTypeIsAnErrorNamingIt) {
  const std::vector<std::pair<std::string, std::function<void(json&)>>> cases = {
      {"apiVersion: ", [](json& j) { j["apiVersion"] = 1; }},
      {"kind: ", [](json& j) { j["kind"] = json::array({"TFJob"}); }},
      {"metadata: ", [](json& j) { j["metadata"] = json::array({1}); }},
      {"metadata.name: ", [](json& j) { j["metadata"]["name"] = 5; }},
      {"metadata.namespace: ", [](json& j) { j["metadata"]["namespace"] = json::object(); }},
      {"metadata.labels: ", [](json& j) { j["metadata"]["labels"] = "app=x"; }},
      {"spec: ", [](json& j) { j["spec"] = "x"; }},
      {"spec.tfReplicaSpecs: ", [](json& j) { j["spec"]["tfReplicaSpecs"] = json::array(); }},
      {"spec.runPolicy: ", [](json& j) { j["spec"]["runPolicy"] = 3; }},
      {"spec.successPolicy: ", [](json& j) { j["spec"]["successPolicy"] = true; }},
      {"the converted TrainingJob is invalid: ",
       [](json& j) { j["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"; }},
  };
  for (const auto& [field, mutate] : cases) {
    json tfjob = Load("tfjob-mnist.yaml");
    mutate(tfjob);
    StatusOr<TfJobConversion> c = Status::Error("not run");
    ASSERT_NO_THROW(c = ConvertTfJob(tfjob)) << field;
    ASSERT_FALSE(c.ok()) << field;
    EXPECT_EQ(c.status().message().rfind(field, 0), 0u) << c.status().message();
  }
}

TEST(ConvertTfJob, AnUnknownSpecFieldIsNamedInANote) {
  json tfjob = Load("tfjob-mnist.yaml");
  tfjob["spec"]["elasticPolicy"] = {{"minReplicas", 1}};
  auto c = ConvertTfJob(tfjob);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(HasNote(*c, "spec.elasticPolicy dropped"));
}

}  // namespace
}  // namespace tj::api

namespace tj::api {
namespace {

// tj-operator convert reads whatever file it is given: a YAML alias can make a few bytes a
// tree that never ends (an alias inside its own anchor) or grows tenfold per line (aliases of
// aliases). Both are an error naming the bound, never an endless recursion.
TEST(ParseManifests, AnAliasInsideItsOwnAnchorIsAnError) {
  auto docs = ParseManifests("a: &x\n  b: *x\n");
  ASSERT_FALSE(docs.ok());
  EXPECT_NE(docs.status().message().find("nested deeper than 100 levels"), std::string::npos)
      << docs.status().message();
  EXPECT_NE(docs.status().message().find("document 1"), std::string::npos);
}

TEST(ParseManifests, AliasesOfAliasesPastTheNodeBoundAreAnError) {
  std::string text = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 7; ++i) {  // 10^7 values once expanded
    const std::string prev = "*l" + std::to_string(i - 1);
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) text += (k ? ", " : "") + prev;
    text += "]\n";
  }
  auto docs = ParseManifests(text);
  ASSERT_FALSE(docs.ok());
  EXPECT_NE(docs.status().message().find("values once its aliases are expanded"), std::string::npos)
      << docs.status().message();
}

// Few nodes, many bytes: an alias of a 1 MiB scalar repeated 4,096 times is 4 GiB once
// expanded, far under the node bound. The byte bound stops it before memory does.
TEST(ParseManifests, AliasesOfALargeScalarPastTheByteBoundAreAnError) {
  std::string text = "big: &big " + std::string(size_t{1} << 20, 'x') + "\nl0: &l0 [";
  for (int k = 0; k < 16; ++k) text += k ? ", *big" : "*big";
  text += "]\n";
  for (int i = 1; i <= 3; ++i) {  // 16^4 copies of the scalar
    const std::string prev = "*l" + std::to_string(i - 1);
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 16; ++k) text += (k ? ", " : "") + prev;
    text += "]\n";
  }
  auto docs = ParseManifests(text);
  ASSERT_FALSE(docs.ok());
  EXPECT_NE(docs.status().message().find("MiB of keys and values once its aliases are expanded"),
            std::string::npos)
      << docs.status().message();
}

TEST(ParseManifests, PlainAliasesWithinTheBoundsStillWork) {
  auto docs = ParseManifests("base: &b {image: x, args: [1, 2]}\nworker: *b\n");
  ASSERT_TRUE(docs.ok()) << docs.status().message();
  EXPECT_EQ((*docs)[0]["worker"]["args"][1], 2);
}

}  // namespace
}  // namespace tj::api
