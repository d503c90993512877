#include "processnode/pod_spec.h"

#include <gtest/gtest.h>

namespace tj::processnode {
namespace {

using S = ContainerState::Phase;

json Pod() {
  return json::parse(R"j({
    "metadata": {"name": "job-worker-1", "namespace": "ml", "uid": "u-1",
                 "labels": {"tjo.dev/replica-index": "1"}},
    "spec": {"restartPolicy": "Never", "containers": [{"name": "trainer",
      "image": "ghcr.io/x/tj-trainer:v1",
      "args": ["--epochs=1"],
      "env": [{"name": "A", "value": "a"},
              {"name": "B", "value": "$(A)-b $$(A)"},
              {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
              {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
              {"name": "IDX", "valueFrom": {"fieldRef":
                 {"fieldPath": "metadata.labels['tjo.dev/replica-index']"}}},
              {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
              {"name": "OPT", "valueFrom": {"configMapKeyRef":
                 {"name": "missing", "key": "k", "optional": true}}}]}]}})j");
}

StatusOr<std::string> Lookup(const std::string& kind, const std::string& name,
                             const std::string& key) {
  if (kind == "Secret" && name == "s" && key == "k") return std::string("secret-value");
  return Status::Error(kind + " " + name + " not found");
}

TEST(PodSpec, ImagesMapToLocalExecutables) {
  EXPECT_EQ(ExecutableForImage("ghcr.io/x/tj-trainer:v1", "/b"), "/b/tj-trainer");
  EXPECT_EQ(ExecutableForImage("tj-operator@sha256:abc", "/b"), "/b/tj-operator");
  EXPECT_EQ(ExecutableForImage("registry:5000/my-tj-trainer", "/b"), "/b/tj-trainer");
  EXPECT_EQ(ExecutableForImage("localhost/tj-trainer-cpu:0.1.0", "/b"), "/b/tj-trainer");
  EXPECT_EQ(ExecutableForImage("busybox:1.36", "/b"), "/bin/sh");
  EXPECT_FALSE(ExecutableForImage("nginx", "/b").has_value());
}

TEST(PodSpec, ArgvFromCommandOrImage) {
  json pod = Pod();
  auto argv = ContainerArgv(pod["spec"]["containers"][0], "/b");
  ASSERT_TRUE(argv.ok());
  EXPECT_EQ(*argv, (std::vector<std::string>{"/b/tj-trainer", "--epochs=1"}));
  json c = {{"name", "sh"}, {"image", "nginx"}, {"command", {"sh", "-c"}}, {"args", {"exit 3"}}};
  EXPECT_EQ(*ContainerArgv(c, "/b"), (std::vector<std::string>{"sh", "-c", "exit 3"}));
  c.erase("command");
  auto bad = ContainerArgv(c, "/b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nginx"), std::string::npos);
}

TEST(PodSpec, EnvResolvesReferencesAndExpansions) {
  json pod = Pod();
  auto env = ContainerEnv(pod, pod["spec"]["containers"][0], "127.0.1.5", "n", Lookup);
  ASSERT_TRUE(env.ok()) << env.status().message();
  EXPECT_EQ(*env, (std::vector<std::string>{"A=a", "B=a-b $(A)", "POD=job-worker-1", "IP=127.0.1.5",
                                            "IDX=1", "KEY=secret-value"}));
  pod["spec"]["containers"][0]["env"].push_back(
      {{"name", "X"}, {"valueFrom", {{"secretKeyRef", {{"name", "nope"}, {"key", "k"}}}}}});
  auto missing = ContainerEnv(pod, pod["spec"]["containers"][0], "", "n", Lookup);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("env X"), std::string::npos);
}

TEST(PodSpec, LoopbackAddressesAreDistinctAndValid) {
  std::set<std::string> seen;
  for (int n = 0; n < 2000; ++n) {
    std::string ip = LoopbackAddress(n);
    EXPECT_TRUE(seen.insert(ip).second) << ip;
    EXPECT_EQ(ip.rfind("127.0.", 0), 0u);
    EXPECT_NE(ip.substr(ip.rfind('.') + 1), "255");
  }
  EXPECT_EQ(LoopbackAddress(0), "127.0.1.2");
  EXPECT_EQ(LoopbackAddress(0, 37), "127.37.1.2");
  EXPECT_EQ(LoopbackAddress(253, 37), "127.37.2.2");
}

TEST(PodSpec, HostsFileNamesThePeers) {
  std::string hosts = HostsFile("127.0.1.2", "job-worker-0",
                                {{"127.0.1.2", "job-worker-0", "job", "ml"},
                                 {"127.0.1.3", "job-worker-1", "job", "ml"},
                                 {"127.0.1.4", "lonely", "", "ml"}});
  EXPECT_NE(hosts.find("127.0.1.3\tjob-worker-1.job.ml.svc job-worker-1.job.ml.svc.cluster.local "
                       "job-worker-1\n"),
            std::string::npos);
  EXPECT_NE(hosts.find("127.0.1.2\tjob-worker-0.job.ml.svc"), std::string::npos);
  EXPECT_EQ(hosts.find("lonely"), std::string::npos);
}

ContainerState C(S phase, int code = 0, int restarts = 0) {
  ContainerState c;
  c.name = "c";
  c.phase = phase;
  c.exit_code = code;
  c.restart_count = restarts;
  return c;
}

TEST(PodSpec, PhaseFollowsTheKubelet) {
  EXPECT_EQ(PodPhase({C(S::kWaiting)}, "Never"), "Pending");
  EXPECT_EQ(PodPhase({C(S::kRunning)}, "Never"), "Running");
  EXPECT_EQ(PodPhase({C(S::kTerminated, 0)}, "Never"), "Succeeded");
  EXPECT_EQ(PodPhase({C(S::kTerminated, 3)}, "Never"), "Failed");
  EXPECT_EQ(PodPhase({C(S::kTerminated, 0), C(S::kRunning)}, "Never"), "Running");
  EXPECT_EQ(PodPhase({C(S::kWaiting, 0, 1)}, "OnFailure"), "Running");  // back-off
  EXPECT_EQ(PodPhase({C(S::kTerminated, 0, 1)}, "OnFailure"), "Succeeded");
}

TEST(PodSpec, StatusCarriesExitCodesAndConditions) {
  json pod = Pod();
  ContainerState c = C(S::kTerminated, 3);
  c.name = "trainer";
  c.reason = "Error";
  json st = PodStatus(pod, {c}, "127.0.1.2", "127.0.0.1", "t0", "t1");
  EXPECT_EQ(st["phase"], "Failed");
  EXPECT_EQ(st["podIP"], "127.0.1.2");
  EXPECT_EQ(st["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3);
  EXPECT_EQ(st["containerStatuses"][0]["image"], "ghcr.io/x/tj-trainer:v1");
  bool ready_false = false;
  for (const auto& cond : st["conditions"]) {
    if (cond["type"] == "Ready") ready_false = cond["status"] == "False";
  }
  EXPECT_TRUE(ready_false);
}

TEST(PodSpec, ArgsExpandVariablesFromTheEnvironment) {
  EXPECT_EQ(ExpandArgs({"tj-operator", "--metrics-bind-address=$(POD_IP):8080", "$$(POD_IP)",
                        "$(UNKNOWN)"},
                       {"POD_IP=127.0.1.2", "X=y"}),
            (std::vector<std::string>{"tj-operator", "--metrics-bind-address=127.0.1.2:8080",
                                      "$(POD_IP)", "$(UNKNOWN)"}));
}

}  // namespace
}  // namespace tj::processnode
