// Trainer pods run as non-root, without privilege escalation or capabilities, unless the pod
// template says otherwise (its own value wins, field by field).
#include <gtest/gtest.h>

#include "operator/api/training_job.h"
#include "operator/controller/job_resources.h"

namespace tj::controller {
namespace {

using nlohmann::json;

json Job(json pod_spec) {
  return {{"apiVersion", api::kApiVersion},
          {"kind", api::kKind},
          {"metadata", {{"name", "j"}, {"namespace", "ns"}, {"uid", "u"}}},
          {"spec", {{"replicaSpecs", {{"Worker", {{"template", {{"spec", pod_spec}}}}}}}}}};
}

json TrainerPod(const json& pod_spec) {
  const json job = Job(pod_spec);
  auto spec = api::ParseSpec(job["spec"]);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return BuildPod(job, *spec, api::ReplicaType::kWorker, 0, 0);
}

TEST(PodSecurityDefaults, NonRootNoEscalationNoCapabilitiesForEveryContainer) {
  json pod = TrainerPod({{"containers", json::array({{{"name", "trainer"}, {"image", "t"}},
                                                     {{"name", "sidecar"}, {"image", "s"}}})}});
  const json& s = pod["spec"];
  EXPECT_EQ(s["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(s["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
  EXPECT_EQ(s["securityContext"]["fsGroup"], 65532);
  EXPECT_EQ(s["automountServiceAccountToken"], false);
  ASSERT_EQ(s["containers"].size(), 2u);
  for (const json& c : s["containers"]) {
    EXPECT_EQ(c["securityContext"]["allowPrivilegeEscalation"], false) << c.dump();
    EXPECT_EQ(c["securityContext"]["capabilities"], json({{"drop", json::array({"ALL"})}}))
        << c.dump();
  }
}

// The API server refuses allowPrivilegeEscalation false beside privileged true or an added
// CAP_SYS_ADMIN ("cannot set allowPrivilegeEscalation to false and privileged to true"): such
// a container gets no escalation default, so the pod is judged by the namespace's Pod Security
// level instead of being invalid. Before, every privileged template made an invalid pod.
TEST(PodSecurityDefaults, APrivilegedContainerGetsNoEscalationDefault) {
  const json privileged = {
      {"name", "trainer"}, {"image", "t"}, {"securityContext", {{"privileged", true}}}};
  const json admin = {
      {"name", "admin"},
      {"image", "t"},
      {"securityContext", {{"capabilities", {{"add", json::array({"CAP_SYS_ADMIN"})}}}}}};
  const json plain = {
      {"name", "plain"}, {"image", "t"}, {"securityContext", {{"privileged", false}}}};
  json pod = TrainerPod({{"containers", json::array({privileged, admin, plain})}});
  const json& cs = pod["spec"]["containers"];
  EXPECT_FALSE(cs[0]["securityContext"].contains("allowPrivilegeEscalation")) << cs[0].dump();
  EXPECT_EQ(cs[0]["securityContext"]["privileged"], true);
  EXPECT_FALSE(cs[1]["securityContext"].contains("allowPrivilegeEscalation")) << cs[1].dump();
  EXPECT_EQ(cs[2]["securityContext"]["allowPrivilegeEscalation"], false) << cs[2].dump();
}

TEST(PodSecurityDefaults, InitContainersGetTheContainerDefaults) {
  json pod = TrainerPod({{"initContainers", json::array({{{"name", "fetch"}, {"image", "f"}}})},
                         {"containers", json::array({{{"name", "trainer"}, {"image", "t"}}})}});
  const json& c = pod["spec"]["initContainers"][0];
  EXPECT_EQ(c["securityContext"]["allowPrivilegeEscalation"], false) << c.dump();
  EXPECT_EQ(c["securityContext"]["capabilities"], json({{"drop", json::array({"ALL"})}}));
}

TEST(PodSecurityDefaults, TheTemplatesOwnSettingsWinFieldByField) {
  json pod = TrainerPod(
      {{"securityContext", {{"runAsNonRoot", false}, {"runAsUser", 0}, {"fsGroup", 1000}}},
       {"automountServiceAccountToken", true},
       {"containers",
        json::array(
            {{{"name", "trainer"},
              {"image", "t"},
              {"securityContext", {{"capabilities", {{"add", json::array({"SYS_PTRACE"})}}}}}}})}});
  const json& psc = pod["spec"]["securityContext"];
  EXPECT_EQ(psc["runAsNonRoot"], false);
  EXPECT_EQ(psc["runAsUser"], 0);
  EXPECT_EQ(psc["fsGroup"], 1000);
  EXPECT_EQ(pod["spec"]["automountServiceAccountToken"], true);
  EXPECT_EQ(psc["seccompProfile"]["type"], "RuntimeDefault");  // unset there: the default
  const json& csc = pod["spec"]["containers"][0]["securityContext"];
  EXPECT_EQ(csc["capabilities"], json({{"add", json::array({"SYS_PTRACE"})}}));
  EXPECT_EQ(csc["allowPrivilegeEscalation"], false);
}

TEST(PodSecurityDefaults, MalformedSecurityContextIsReplacedNotThrownOn) {
  json spec = {
      {"securityContext", "root please"},
      {"containers", json::array({{{"name", "trainer"}, {"image", "t"}, {"securityContext", 7}}})}};
  ApplySecurityDefaults(spec);
  EXPECT_EQ(spec["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"], false);
  json no_containers = json::object();
  ApplySecurityDefaults(no_containers);
  EXPECT_EQ(no_containers["securityContext"]["runAsNonRoot"], true);
}

// null is how YAML templating (Helm, kustomize) often writes "not set": the API server then
// applies its own default, which for the token is to mount it. The operator's defaults win.
TEST(PodSecurityDefaults, NullIsUnsetNotAnOptOut) {
  json spec = {
      {"automountServiceAccountToken", nullptr},
      {"securityContext", {{"runAsNonRoot", nullptr}, {"fsGroup", nullptr}}},
      {"initContainers",
       json::array({{{"name", "fetch"},
                     {"image", "f"},
                     {"securityContext",
                      {{"allowPrivilegeEscalation", nullptr}, {"capabilities", nullptr}}}}})},
      {"containers", json::array({{{"name", "trainer"}, {"image", "t"}}})}};
  ApplySecurityDefaults(spec);
  EXPECT_EQ(spec["automountServiceAccountToken"], false);
  EXPECT_EQ(spec["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(spec["securityContext"]["fsGroup"], kDefaultFsGroup);
  const json& csc = spec["initContainers"][0]["securityContext"];
  EXPECT_EQ(csc["allowPrivilegeEscalation"], false);
  EXPECT_EQ(csc["capabilities"], json({{"drop", json::array({"ALL"})}}));
}

}  // namespace
}  // namespace tj::controller
