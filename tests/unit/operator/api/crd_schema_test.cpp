// The TrainingJob CRD (manifests/crd/trainingjob.yaml) as a cluster admin meets it: every
// schema property has a description (what `kubectl explain` prints), no property under
// replicaSpecs or status hides its fields behind x-kubernetes-preserve-unknown-fields (the API
// server would then publish none of them), the CRD is in no category (`kubectl delete all` must
// not delete training jobs), and the Helm chart ships the same file.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

const std::string kCrd = std::string(TJ_SOURCE_DIR) + "/manifests/crd/trainingjob.yaml";

YAML::Node Version() { return YAML::LoadFile(kCrd)["spec"]["versions"][0]; }

// Paths of the properties under `schema` that have no description.
void Undescribed(const YAML::Node& schema, const std::string& path, std::vector<std::string>* out) {
  if (!schema.IsMap()) return;
  if (!schema["description"] && path != "metadata" && path.rfind("metadata.", 0) != 0) {
    out->push_back(path.empty() ? "(root)" : path);
  }
  if (schema["properties"]) {
    for (const auto& p : schema["properties"]) {
      const std::string name = p.first.as<std::string>();
      Undescribed(p.second, path.empty() ? name : path + "." + name, out);
    }
  }
  if (schema["items"]) Undescribed(schema["items"], path + "[]", out);
  if (schema["additionalProperties"]) Undescribed(schema["additionalProperties"], path + ".*", out);
}

TEST(CrdSchema, EveryPropertyHasADescription) {
  std::vector<std::string> missing;
  Undescribed(Version()["schema"]["openAPIV3Schema"], "", &missing);
  std::string list;
  for (const auto& m : missing) list += m + "\n";
  EXPECT_TRUE(missing.empty()) << "properties without a description:\n" << list;
}

TEST(CrdSchema, ReplicaSpecsAndStatusPublishTheirFields) {
  const YAML::Node root = Version()["schema"]["openAPIV3Schema"]["properties"];
  EXPECT_FALSE(root["spec"]["properties"]["replicaSpecs"]["x-kubernetes-preserve-unknown-fields"]);
  EXPECT_FALSE(root["status"]["x-kubernetes-preserve-unknown-fields"]);
  EXPECT_EQ(root["status"]["properties"]["conditions"]["x-kubernetes-list-type"].as<std::string>(),
            "map");
}

TEST(CrdSchema, NoCategoryAndWidePrinterColumns) {
  const YAML::Node names = YAML::LoadFile(kCrd)["spec"]["names"];
  EXPECT_FALSE(names["categories"]) << "kubectl delete all would delete training jobs";
  std::vector<std::string> wide;
  for (const auto& c : Version()["additionalPrinterColumns"]) {
    if (c["priority"] && c["priority"].as<int>() > 0) wide.push_back(c["name"].as<std::string>());
  }
  EXPECT_EQ(wide, (std::vector<std::string>{"Chief", "Evaluator", "Images/s", "Last backup"}));
}

TEST(CrdSchema, TheChartShipsTheSameCrd) {
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  EXPECT_EQ(read(kCrd),
            read(std::string(TJ_SOURCE_DIR) + "/helm/tj-operator/crds/trainingjob.yaml"))
      << "run hack/generate-manifests.sh";
}

}  // namespace
