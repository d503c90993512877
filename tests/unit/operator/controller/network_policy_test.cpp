// The per-job NetworkPolicy: what it selects, whom it admits on which ports, and that it goes
// with the job (owner reference). Its effect on real trainer ports: networkpolicy_ports_test;
// enforced by a real network plugin: network_policy_e2e_test.
#include "operator/controller/network_policy.h"

#include <gtest/gtest.h>

#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

NetworkPolicySettings Operator() {
  return {"tj-system",
          {{"app.kubernetes.io/name", "tj-operator"}, {"app.kubernetes.io/instance", "tj"}}};
}

json PolicyOf(const json& job) {
  auto spec = api::ParseSpec(job["spec"]);
  EXPECT_TRUE(spec.ok());
  return BuildNetworkPolicy(job, *spec, Operator());
}

TEST(NetworkPolicy, SelectsTheJobsPodsAndIsOwnedByTheJob) {
  const json p = PolicyOf(Job());
  EXPECT_EQ(p["apiVersion"], "networking.k8s.io/v1");
  EXPECT_EQ(p["kind"], "NetworkPolicy");
  EXPECT_EQ(p["metadata"]["name"], "mnist-pods");
  EXPECT_EQ(p["metadata"]["namespace"], "ns");
  // The operator's informer lists NetworkPolicies by this label.
  EXPECT_EQ(p["metadata"]["labels"][api::kLabelJobName], "mnist");
  EXPECT_TRUE(IsOwnedBy(p, Job()));
  EXPECT_EQ(p["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  // Exactly this job's pods, not every pod wearing the label.
  EXPECT_EQ(p["spec"]["podSelector"], (json{{"matchLabels", {{"tjo.dev/job-name", "mnist"}}}}));
  EXPECT_EQ(p["spec"]["policyTypes"], json::array({"Ingress"}));
}

TEST(NetworkPolicy, AdmitsTheJobsOwnPodsOnEveryTcpPort) {
  const json rule = PolicyOf(Job())["spec"]["ingress"][0];
  // No namespaceSelector: the policy's own namespace only.
  EXPECT_EQ(rule["from"],
            (json::array({{{"podSelector", {{"matchLabels", {{"tjo.dev/job-name", "mnist"}}}}}}})));
  EXPECT_EQ(rule["ports"], (json::array({{{"protocol", "TCP"}}})));
}

TEST(NetworkPolicy, AdmitsTheOperatorOnTheStatusPortsOnly) {
  const json p = PolicyOf(Job());  // two workers and an evaluator: 8470, 8471, 8472
  ASSERT_EQ(p["spec"]["ingress"].size(), 2u);
  const json rule = p["spec"]["ingress"][1];
  EXPECT_EQ(rule["from"],
            (json::array({{{"namespaceSelector",
                            {{"matchLabels", {{"kubernetes.io/metadata.name", "tj-system"}}}}},
                           {"podSelector",
                            {{"matchLabels",
                              {{"app.kubernetes.io/name", "tj-operator"},
                               {"app.kubernetes.io/instance", "tj"}}}}}}})));
  EXPECT_EQ(rule["ports"], (json::array({{{"protocol", "TCP"}, {"port", 8470}},
                                         {{"protocol", "TCP"}, {"port", 8471}},
                                         {{"protocol", "TCP"}, {"port", 8472}}})));
}

TEST(NetworkPolicy, StatusPortsFollowTheTemplates) {
  json job = Job(3, true);
  job["spec"]["replicaSpecs"]["Chief"] = {{"replicas", 1}, {"template", Template()}};
  auto ports = [&job] { return StatusPorts(*api::ParseSpec(job["spec"])); };
  // Chief 8470, workers 8471..8473, evaluator 8474: BuildPod's ordinals.
  EXPECT_EQ(ports(), (std::set<int>{8470, 8471, 8472, 8473, 8474}));
  // A literal TJ_STATUS_PORT or --status-port: that port for every replica of the type.
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] =
      json::array({{{"name", "TJ_STATUS_PORT"}, {"value", "9000"}}});
  job["spec"]["replicaSpecs"]["Evaluator"]["template"]["spec"]["containers"][0]["args"] =
      json::array({"--status-port=9100"});
  EXPECT_EQ(ports(), (std::set<int>{8470, 9000, 9100}));
  // From elsewhere (valueFrom): unknown to the operator, which then never reads it.
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] =
      json::array({{{"name", "TJ_STATUS_PORT"},
                    {"valueFrom", {{"configMapKeyRef", {{"name", "c"}, {"key", "k"}}}}}}});
  EXPECT_EQ(ports(), (std::set<int>{8470, 9100}));
  // Every pod built from the spec reads its /status on one of the ports.
  job["spec"]["replicaSpecs"]["Worker"]["template"] = Template();
  const auto spec = api::ParseSpec(job["spec"]);
  const std::set<int> all = StatusPorts(*spec);
  for (auto [type, n] : {std::pair{ReplicaType::kChief, 1}, std::pair{ReplicaType::kWorker, 3},
                         std::pair{ReplicaType::kEvaluator, 1}}) {
    for (int i = 0; i < n; ++i) {
      const auto port = StatusPortOf(BuildPod(job, *spec, type, i, 0));
      ASSERT_TRUE(port.has_value());
      EXPECT_TRUE(all.count(*port)) << api::TaskName(type) << " " << i << ": " << *port;
    }
  }
}

TEST(NetworkPolicy, NoStatusPortKnownLeavesOnlyTheJobsOwnPods) {
  json job = Job(1, false);
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] =
      json::array({{{"name", "TJ_STATUS_PORT"},
                    {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}}});
  const json p = PolicyOf(job);
  ASSERT_EQ(p["spec"]["ingress"].size(), 1u);
  EXPECT_EQ(p["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["tjo.dev/job-name"],
            "mnist");
}

TEST(NetworkPolicy, TheLargestJobListsEachStatusPort) {
  const json p = PolicyOf(Job(512, true));
  const json& ports = p["spec"]["ingress"][1]["ports"];
  ASSERT_EQ(ports.size(), 513u);
  EXPECT_EQ(ports.front()["port"], 8470);
  EXPECT_EQ(ports.back()["port"], 8470 + 512);
  for (const json& port : ports) EXPECT_FALSE(port.contains("endPort"));
}

TEST(ParseLabels, KeyValuePairs) {
  auto l = ParseLabels("a=1,b.io/c=x");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (std::map<std::string, std::string>{{"a", "1"}, {"b.io/c", "x"}}));
  EXPECT_FALSE(ParseLabels("").ok());
  EXPECT_FALSE(ParseLabels("a").ok());
  EXPECT_FALSE(ParseLabels("a=1,,b=2").ok());
  auto bad = ParseLabels("=1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"=1\""), std::string::npos);
}

}  // namespace
}  // namespace tj::controller
