// The pods the operator creates (operator/controller/job_resources.cpp): names, labels,
// environment and owner; the user's status port, container choice and args kept; the chief in
// TF_CONFIG; the headless Service.
#include "operator/controller/job_resources.h"

#include <gtest/gtest.h>

#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

TEST(Pods, NamesLabelsEnvAndOwner) {
  json job = Job();
  auto spec = api::ParseSpec(job["spec"]);
  json p = BuildPod(job, *spec, ReplicaType::kWorker, 1, 3);
  EXPECT_EQ(p["metadata"]["name"], "mnist-worker-1");
  EXPECT_EQ(p["metadata"]["labels"]["tjo.dev/job-name"], "mnist");
  EXPECT_EQ(p["metadata"]["labels"]["tjo.dev/replica-type"], "worker");
  EXPECT_EQ(p["metadata"]["labels"]["tjo.dev/replica-index"], "1");
  EXPECT_EQ(p["metadata"]["labels"]["tjo.dev/restart-count"], "3");
  EXPECT_EQ(p["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(p["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(p["spec"]["hostname"], "mnist-worker-1");
  EXPECT_EQ(p["spec"]["subdomain"], "mnist");
  EXPECT_EQ(p["spec"]["restartPolicy"], "Never");
  const json& c = p["spec"]["containers"][0];
  std::map<std::string, json> env;
  for (const auto& e : c["env"]) env[e["name"]] = e;
  json tf = json::parse(env["TF_CONFIG"]["value"].get<std::string>());
  EXPECT_EQ(tf["task"]["type"], "worker");
  EXPECT_EQ(tf["task"]["index"], 1);
  EXPECT_EQ(tf["environment"], "cloud");
  EXPECT_EQ(tf["cluster"]["worker"][1], "mnist-worker-1.mnist.ns.svc:2222");
  EXPECT_EQ(tf["cluster"]["evaluator"][0], "mnist-evaluator-0.mnist.ns.svc:2222");
  EXPECT_FALSE(tf["cluster"].contains("chief"));
  EXPECT_EQ(env["TJ_JOB_NAME"]["value"], "mnist");
  EXPECT_EQ(env["TJ_RESTART_COUNT"]["value"], "3");
  EXPECT_EQ(env["TJ_JOB_UID"]["value"], "uid-1");  // the backups' scope
  EXPECT_EQ(env["TJ_RENDEZVOUS_KEY"]["valueFrom"]["secretKeyRef"]["name"], "mnist-rendezvous-uid1");
  EXPECT_EQ(c["args"], json::array({"--epochs", "2"}));  // the args as written
  EXPECT_EQ(env["TJ_STATUS_PORT"]["value"], "8471");
  EXPECT_EQ(StatusPortOf(p), 8471);
  // Prometheus' pod discovery (the chart's PodMonitor) finds /metrics by this annotation.
  EXPECT_EQ(p["metadata"]["annotations"]["tjo.dev/status-port"], "8471");
  EXPECT_EQ(StatusPortOf(BuildPod(job, *spec, ReplicaType::kWorker, 0, 0)), 8470);
  EXPECT_EQ(StatusPortOf(BuildPod(job, *spec, ReplicaType::kEvaluator, 0, 0)), 8472);
}

TEST(Pods, KeepsUserStatusPortAndPicksTrainerContainer) {
  json job = Job();
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] =
      json::array({{{"name", "sidecar"}, {"image", "busybox"}},
                   {{"name", "trainer"},
                    {"image", "x/tj-trainer"},
                    {"args", {"--status-port=9000"}},
                    {"env", json::array({{{"name", "TF_CONFIG"}, {"value", "user"}}})}}});
  job["spec"]["port"] = 3333;
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  json p = BuildPod(job, *spec, ReplicaType::kWorker, 0, 0);
  EXPECT_FALSE(p["spec"]["containers"][0].contains("env"));
  const json& c = p["spec"]["containers"][1];
  EXPECT_EQ(c["args"], json::array({"--status-port=9000"}));
  EXPECT_EQ(StatusPortOf(p), 9000);
  EXPECT_EQ(p["metadata"]["annotations"]["tjo.dev/status-port"], "9000");
  for (const auto& e : c["env"]) EXPECT_NE(e["name"], "TJ_STATUS_PORT");
  int tf_configs = 0;
  for (const auto& e : c["env"]) {
    if (e["name"] == "TF_CONFIG") {
      ++tf_configs;
      EXPECT_NE(e["value"].get<std::string>().find(":3333"), std::string::npos);
    }
  }
  EXPECT_EQ(tf_configs, 1);
}

// A TFJob user's template: the container named "tensorflow" gets TF_CONFIG and the status port
// by env only (a strict argument parser sees its args as written); a container port named
// "tfjob-port" is the port TF_CONFIG gives for that replica type, as TFJob reads it.
TEST(Pods, TfJobContainerAndPortAndArgsUntouched) {
  json job = Job();
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] =
      json::array({{{"name", "trainer"}, {"image", "sidecar"}},
                   {{"name", "tensorflow"},
                    {"image", "user/mnist"},
                    {"command", {"python3", "/app/train.py"}},
                    {"args", {"--strict", "1"}},
                    {"ports", json::array({{{"name", "tfjob-port"}, {"containerPort", 2223}}})}}});
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(ReplicaPort(*spec, ReplicaType::kWorker), 2223);
  EXPECT_EQ(ReplicaPort(*spec, ReplicaType::kEvaluator), 2222);  // no tfjob-port: spec.port
  json p = BuildPod(job, *spec, ReplicaType::kWorker, 1, 0);
  EXPECT_FALSE(p["spec"]["containers"][0].contains("env"));
  const json& c = p["spec"]["containers"][1];
  EXPECT_EQ(c["command"], json::array({"python3", "/app/train.py"}));
  EXPECT_EQ(c["args"], json::array({"--strict", "1"}));
  std::map<std::string, json> env;
  for (const auto& e : c["env"]) env[e["name"]] = e;
  json tf = json::parse(env["TF_CONFIG"]["value"].get<std::string>());
  EXPECT_EQ(tf["cluster"]["worker"][0], "mnist-worker-0.mnist.ns.svc:2223");
  EXPECT_EQ(tf["cluster"]["evaluator"][0], "mnist-evaluator-0.mnist.ns.svc:2222");
  EXPECT_EQ(env["TJ_STATUS_PORT"]["value"], "8471");
  EXPECT_EQ(StatusPortOf(p), 8471);
  json svc = BuildService(job, *spec);
  ASSERT_EQ(svc["spec"]["ports"].size(), 2u);
  EXPECT_EQ(svc["spec"]["ports"][1]["port"], 2223);
}

TEST(Pods, StatusPortFromTemplateEnvIsKept) {
  json job = Job();
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] =
      json::array({{{"name", "TJ_STATUS_PORT"}, {"value", "0"}}});
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  json p = BuildPod(job, *spec, ReplicaType::kWorker, 0, 0);
  int n = 0;
  for (const auto& e : p["spec"]["containers"][0]["env"]) {
    if (e["name"] == "TJ_STATUS_PORT") {
      ++n;
      EXPECT_EQ(e["value"], "0");
    }
  }
  EXPECT_EQ(n, 1);
  EXPECT_EQ(StatusPortOf(p), std::nullopt);  // 0: off, nothing to poll
}

TEST(Pods, ChiefInClusterAndServiceHeadless) {
  json job = Job();
  job["spec"]["replicaSpecs"]["Chief"] = {{"replicas", 1}, {"template", Template()}};
  auto spec = api::ParseSpec(job["spec"]);
  json tf = TfConfig(api::RefOf(job), *spec, ReplicaType::kChief, 0);
  EXPECT_EQ(tf["cluster"]["chief"][0], "mnist-chief-0.mnist.ns.svc:2222");
  EXPECT_EQ(tf["cluster"]["worker"].size(), 2u);
  json svc = BuildService(job, *spec);
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["selector"]["tjo.dev/job-name"], "mnist");
  json sec = BuildSecret(job, "abc");
  EXPECT_EQ(sec["metadata"]["name"], "mnist-rendezvous-uid1");
  EXPECT_EQ(sec["stringData"]["key"], "abc");
}

// The rendezvous Secret's name carries the job's UID: a deleted job of the same name (another
// UID) had another, and one of this name is this job's own (Executor::CreateSecret).
TEST(Pods, TheSecretsNameCarriesTheJobsUid) {
  EXPECT_EQ(
      SecretName({.name = "mnist", .ns = "ns", .uid = "5c1f0a8e-93d2-4b8e-b1c4-0e2f6a7d9c31"}),
      "mnist-rendezvous-5c1f0a8e");
  EXPECT_NE(
      SecretName({.name = "mnist", .ns = "ns", .uid = "7d00be12-0000-4000-8000-000000000000"}),
      SecretName({.name = "mnist", .ns = "ns", .uid = "5c1f0a8e-93d2-4b8e-b1c4-0e2f6a7d9c31"}));
  // Only what a DNS subdomain allows is taken from a UID the API server would not write.
  EXPECT_EQ(SecretName({.name = "mnist", .ns = "ns", .uid = "A_b/../c-1"}), "mnist-rendezvous-bc1");
  EXPECT_EQ(SecretName({.name = "mnist", .ns = "ns", .uid = ""}), "mnist-rendezvous");
}

}  // namespace
}  // namespace tj::controller
