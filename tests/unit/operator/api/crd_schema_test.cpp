// The TrainingJob CRD (manifests/crd/trainingjob.yaml) as a cluster admin meets it: every
// schema property has a description (what `kubectl explain` prints), no property under
// replicaSpecs or status hides its fields behind x-kubernetes-preserve-unknown-fields (the API
// server would then publish none of them) but the pod templates, the CRD is in the category
// "training" and not "all" (`kubectl delete all` must not delete training jobs), and the Helm
// chart ships the same file.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace {

const std::string kCrd = std::string(TJ_SOURCE_DIR) + "/manifests/crd/trainingjob.yaml";

YAML::Node Version() { return YAML::LoadFile(kCrd)["spec"]["versions"][0]; }

// Calls `visit(path, node)` for `schema` and every schema below it: properties by name, array
// items as "[]", map values as ".*". The root's path is empty.
void Walk(const YAML::Node& schema, const std::string& path,
          const std::function<void(const std::string&, const YAML::Node&)>& visit) {
  if (!schema.IsMap()) return;
  visit(path, schema);
  if (schema["properties"]) {
    for (const auto& p : schema["properties"]) {
      const std::string name = p.first.as<std::string>();
      Walk(p.second, path.empty() ? name : path + "." + name, visit);
    }
  }
  if (schema["items"]) Walk(schema["items"], path + "[]", visit);
  if (schema["additionalProperties"]) Walk(schema["additionalProperties"], path + ".*", visit);
}

TEST(CrdSchema, EveryPropertyHasADescription) {
  std::string missing;
  Walk(Version()["schema"]["openAPIV3Schema"], "", [&](const std::string& path, const auto& s) {
    // metadata is ObjectMeta: the API server describes it.
    if (path == "metadata" || path.rfind("metadata.", 0) == 0) return;
    if (!s["description"]) missing += (path.empty() ? "(root)" : path) + "\n";
  });
  EXPECT_TRUE(missing.empty()) << "properties without a description:\n" << missing;
}

// Only the pod templates (core/v1 PodTemplateSpec: kubectl explain pod.spec documents them) and
// the refused TFJob types are opaque; everything else is published field by field.
TEST(CrdSchema, OnlyPodTemplatesHideTheirFields) {
  std::vector<std::string> opaque;
  Walk(Version()["schema"]["openAPIV3Schema"], "", [&](const std::string& path, const auto& s) {
    if (s["x-kubernetes-preserve-unknown-fields"]) opaque.push_back(path);
  });
  EXPECT_EQ(opaque, (std::vector<std::string>{"spec.replicaSpecs.PS", "spec.replicaSpecs.Master",
                                              "spec.replicaSpecs.Chief.template",
                                              "spec.replicaSpecs.Worker.template",
                                              "spec.replicaSpecs.Evaluator.template"}));
  const YAML::Node status = Version()["schema"]["openAPIV3Schema"]["properties"]["status"];
  EXPECT_EQ(status["properties"]["conditions"]["x-kubernetes-list-type"].as<std::string>(), "map");
  EXPECT_EQ(status["properties"]["conditions"]["x-kubernetes-list-map-keys"][0].as<std::string>(),
            "type");
}

// Server-side apply merges lists by their type: every list says how (a keyed map, a set, or
// atomic, owned whole by one manager), so that no list is atomic by accident.
TEST(CrdSchema, EveryListHasAListType) {
  std::map<std::string, std::string> types;
  Walk(Version()["schema"]["openAPIV3Schema"], "", [&](const std::string& path, const auto& s) {
    if (s["type"] && s["type"].template as<std::string>() == "array") {
      types[path] = s["x-kubernetes-list-type"]
                        ? s["x-kubernetes-list-type"].template as<std::string>()
                        : "(none)";
    }
  });
  EXPECT_EQ(types,
            (std::map<std::string, std::string>{{"spec.failurePolicy.rules", "atomic"},
                                                {"spec.failurePolicy.rules[].onCauses", "set"},
                                                {"status.conditions", "map"}}));
}

// Every validation rule (CEL) has a message that names the field it refuses and says what to
// do instead; the TFJob types and spec.managedBy have theirs.
TEST(CrdSchema, EveryValidationRuleSaysWhatToDo) {
  std::map<std::string, std::vector<std::string>> messages;
  Walk(Version()["schema"]["openAPIV3Schema"], "", [&](const std::string& path, const auto& s) {
    if (!s["x-kubernetes-validations"]) return;
    for (const auto& r : s["x-kubernetes-validations"]) {
      ASSERT_TRUE(r["rule"]) << path;
      ASSERT_TRUE(r["message"]) << path << ": " << r["rule"].template as<std::string>();
      const std::string m = r["message"].template as<std::string>();
      EXPECT_TRUE(m.find("spec.") == 0 || m.find("metadata.") == 0) << m;
      messages[path.empty() ? "(root)" : path].push_back(m);
    }
  });
  auto said = [&](const std::string& path, const std::string& what) {
    for (const auto& m : messages[path]) {
      if (m.find(what) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(said("spec.replicaSpecs", "use Worker replicas"));
  EXPECT_TRUE(said("spec.replicaSpecs", "both Chief and Master"));
  EXPECT_TRUE(said("spec.replicaSpecs", "rename it to Chief"));
  EXPECT_TRUE(said("spec.managedBy", "immutable"));
  EXPECT_TRUE(said("spec", "immutable"));
  EXPECT_TRUE(said("(root)", "shorten the name"));
}

// Not "all" (kubectl delete all would delete training jobs); the project's own category.
TEST(CrdSchema, TrainingCategoryAndWidePrinterColumns) {
  const YAML::Node names = YAML::LoadFile(kCrd)["spec"]["names"];
  ASSERT_TRUE(names["categories"]);
  EXPECT_EQ(names["categories"].as<std::vector<std::string>>(),
            std::vector<std::string>{"training"});
  std::vector<std::string> wide;
  for (const auto& c : Version()["additionalPrinterColumns"]) {
    if (c["priority"] && c["priority"].as<int>() > 0) wide.push_back(c["name"].as<std::string>());
  }
  EXPECT_EQ(wide, (std::vector<std::string>{"Chief", "Evaluator", "Images/s", "Last backup"}));
}

TEST(CrdSchema, TheChartShipsTheSameCrd) {
  EXPECT_EQ(tj::testing::ReadBytes(kCrd),
            tj::testing::ReadBytes(std::string(TJ_SOURCE_DIR) +
                                   "/helm/tj-operator/crds/trainingjob.yaml"))
      << "run hack/generate-manifests.sh";
}

}  // namespace
