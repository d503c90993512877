// The view of a Node the operator reads (node_view.h), and how a pod's tolerations meet the
// node's taints: Kubernetes' own matching (Toleration.ToleratesTaint), tolerationSeconds timed
// from the taint's timeAdded, and when a node is lost to a pod. The view of the node the
// informer cache keeps (TrimNodeForCache) must equal the view of the whole node.
#include "operator/controller/node_view.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator/controller/cache_transforms.h"

namespace tj::controller {
namespace {

using nlohmann::json;
using std::chrono::seconds;

const kube::WallTime kNow = kube::WallTime(seconds(1700000000));

// A Node as the API server returns it, its Ready condition `ready` since `since`.
json WholeNode(const std::string& ready, kube::WallTime since, json taints = json::array()) {
  const std::string t = kube::FormatTime(since);
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", "node-a"},
        {"uid", "node-uid"},
        {"resourceVersion", "7"},
        {"labels", {{"kubernetes.io/hostname", "node-a"}}},
        {"annotations", {{"node.alpha.kubernetes.io/ttl", "0"}}},
        {"managedFields", json::array({{{"manager", "kubelet"}}})}}},
      {"spec", {{"podCIDR", "10.0.1.0/24"}, {"taints", std::move(taints)}}},
      {"status",
       {{"conditions",
         json::array({{{"type", "MemoryPressure"},
                       {"status", "False"},
                       {"reason", "KubeletHasSufficientMemory"},
                       {"lastHeartbeatTime", t},
                       {"lastTransitionTime", t}},
                      {{"type", "Ready"},
                       {"status", ready},
                       {"reason", ready == "True" ? "KubeletReady" : "NodeStatusUnknown"},
                       {"message", "Kubelet stopped posting node status."},
                       {"lastHeartbeatTime", t},
                       {"lastTransitionTime", t}}})},
        {"addresses", json::array({{{"type", "InternalIP"}, {"address", "10.0.0.1"}}})},
        {"capacity", {{"cpu", "8"}, {"memory", "32Gi"}}},
        {"images",
         json::array({{{"names", json::array({"tj-trainer:0.1.0"})}, {"sizeBytes", 123456789}}})},
        {"nodeInfo", {{"kubeletVersion", "v1.37.2"}}}}}};
}

json NoExecute(const std::string& key, std::optional<kube::WallTime> added,
               const std::string& value = "") {
  json t = {{"key", key}, {"effect", "NoExecute"}};
  if (!value.empty()) t["value"] = value;
  if (added) t["timeAdded"] = kube::FormatTime(*added);
  return t;
}

TEST(Tolerates, AsKubernetesMatchesATolerationToATaint) {
  const Taint taint{"k", "v", "NoExecute", std::nullopt};
  struct Case {
    Toleration t;
    bool tolerates;
  };
  const std::vector<Case> cases = {
      {{"k", "Equal", "v", "NoExecute", std::nullopt}, true},
      {{"k", "", "v", "NoExecute", std::nullopt}, true},  // no operator: Equal
      {{"k", "Equal", "w", "NoExecute", std::nullopt}, false},
      {{"k", "Exists", "", "NoExecute", std::nullopt}, true},
      {{"k", "Exists", "", "", std::nullopt}, true},  // no effect: every effect
      {{"k", "Exists", "", "NoSchedule", std::nullopt}, false},
      {{"", "Exists", "", "", std::nullopt}, true},  // no key with Exists: every taint
      {{"", "Exists", "", "NoSchedule", std::nullopt}, false},
      {{"j", "Exists", "", "NoExecute", std::nullopt}, false},
      {{"k", "Lt", "v", "NoExecute", std::nullopt}, false},  // an operator it does not know
      {{"k", "exists", "", "NoExecute", std::nullopt}, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Tolerates(c.t, taint), c.tolerates)
        << c.t.key << " " << c.t.op << " " << c.t.value << " " << c.t.effect;
  }
}

TEST(TolerationsOf, ReadsAPodsTolerationsAndSkipsWhatIsMistyped) {
  const json tolerations =
      json::array({{{"key", "node.kubernetes.io/unreachable"},
                    {"operator", "Exists"},
                    {"effect", "NoExecute"},
                    {"tolerationSeconds", 300}},
                   "not an object",
                   {{"key", 7}, {"operator", "Exists"}, {"tolerationSeconds", "300"}}});
  const std::vector<Toleration> t = TolerationsOf(tolerations);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0], (Toleration{"node.kubernetes.io/unreachable", "Exists", "", "NoExecute", 300}));
  EXPECT_EQ(t[1], (Toleration{"", "Exists", "", "", std::nullopt}));
  EXPECT_TRUE(TolerationsOf(json{{"key", "k"}}).empty());
}

TEST(NodeView, TheCachedNodeReadsAsTheWholeOne) {
  for (const json& whole :
       {WholeNode("True", kNow), WholeNode("Unknown", kNow - seconds(60)),
        WholeNode(
            "True", kNow,
            json::array({NoExecute("node.kubernetes.io/unreachable", kNow, ""),
                         {{"key", "dedicated"}, {"value", "gpu"}, {"effect", "NoSchedule"}}}))}) {
    json trimmed = whole;
    TrimNodeForCache(trimmed);
    EXPECT_LT(trimmed.dump().size(), whole.dump().size());
    EXPECT_EQ(ViewOfNode(trimmed), ViewOfNode(whole)) << whole.dump();
    json again = trimmed;
    TrimNodeForCache(again);
    EXPECT_EQ(again, trimmed) << "the transform is idempotent";
  }
  const NodeView v = ViewOfNode(WholeNode("Unknown", kNow - seconds(60)));
  EXPECT_EQ(v.name, "node-a");
  EXPECT_EQ(v.ready, "Unknown");
  EXPECT_EQ(v.ready_reason, "NodeStatusUnknown");
  EXPECT_EQ(v.ready_since, kNow - seconds(60));
}

// A kubelet's heartbeat moves lastHeartbeatTime (and the resourceVersion) only: after the
// trim, the update changes nothing the rules read, and brings no pass.
TEST(NodeView, AHeartbeatAloneChangesNothingTheCacheKeeps) {
  json before = WholeNode("True", kNow);
  json after = before;
  after["metadata"]["resourceVersion"] = "8";
  after["status"]["conditions"][1]["lastHeartbeatTime"] = kube::FormatTime(kNow + seconds(10));
  TrimNodeForCache(before);
  TrimNodeForCache(after);
  EXPECT_TRUE(OnlyVersionChanged(before, after));
  json cordoned = after;
  cordoned["spec"]["unschedulable"] = true;
  EXPECT_FALSE(OnlyVersionChanged(before, cordoned));
}

TEST(NodeView, MistypedFieldsReadAsAbsent) {
  const NodeView v = ViewOfNode({{"metadata", {{"name", "n"}}},
                                 {"spec", {{"taints", "none"}, {"unschedulable", "yes"}}},
                                 {"status",
                                  {{"conditions", {{"type", "Ready"}}},
                                   {"declaredFeatures", kRestartAllContainersFeature}}}});
  EXPECT_EQ(v, (NodeView{"n", "", "", std::nullopt, {}, false, false}));
  EXPECT_EQ(ViewOfNode(json("node")), NodeView{});
}

// A kubelet 1.36+ lists the features it declares (status.declaredFeatures); the cache keeps
// only the one the operator reads, so the view of the cached node is the whole one's, and a
// feature of no interest that comes or goes changes nothing it keeps.
TEST(NodeView, OfTheDeclaredFeaturesTheCacheKeepsTheInPlaceRestartOne) {
  json whole = WholeNode("True", kNow);
  whole["status"]["declaredFeatures"] = {"GuaranteedQoSPodCPUResize", kRestartAllContainersFeature,
                                         "SidecarContainers"};
  json trimmed = whole;
  TrimNodeForCache(trimmed);
  EXPECT_EQ(trimmed["status"]["declaredFeatures"], json::array({kRestartAllContainersFeature}));
  EXPECT_TRUE(ViewOfNode(whole).restarts_all_containers);
  EXPECT_EQ(ViewOfNode(trimmed), ViewOfNode(whole));
  json more = whole;
  more["metadata"]["resourceVersion"] = "8";
  more["status"]["declaredFeatures"].push_back("SomethingNew");
  TrimNodeForCache(more);
  EXPECT_TRUE(OnlyVersionChanged(trimmed, more));

  // Without it (an older kubelet, the feature gate off, a node agent that declares nothing),
  // or mistyped, the list is not kept.
  for (const json& features :
       {json::array({"SidecarContainers"}), json::array(), json("RestartAll"), json(7)}) {
    json other = WholeNode("True", kNow);
    other["status"]["declaredFeatures"] = features;
    json cached = other;
    TrimNodeForCache(cached);
    EXPECT_FALSE(cached["status"].contains("declaredFeatures")) << features.dump();
    EXPECT_FALSE(ViewOfNode(other).restarts_all_containers) << features.dump();
    EXPECT_EQ(ViewOfNode(cached), ViewOfNode(other)) << features.dump();
  }
}

TEST(TakesNewPods, AReadyNodeNotCordoned) {
  NodeView v = ViewOfNode(WholeNode("True", kNow));
  EXPECT_TRUE(TakesNewPods(v));
  // A taint does not keep it out: a gang's pods may tolerate it.
  v.taints.push_back({"dedicated", "gpu", "NoSchedule", std::nullopt});
  EXPECT_TRUE(TakesNewPods(v));
  v.unschedulable = true;
  EXPECT_FALSE(TakesNewPods(v));
  for (const char* ready : {"False", "Unknown"}) {
    EXPECT_FALSE(TakesNewPods(ViewOfNode(WholeNode(ready, kNow)))) << ready;
  }
  EXPECT_FALSE(TakesNewPods(NodeView{})) << "no Ready condition yet";
}

TEST(ChooseInPlace, OnlyWhenEveryNodeThatTakesPodsDeclaresTheFeature) {
  using Because = InPlaceChoice::Because;
  struct Case {
    std::optional<InPlaceNodes> nodes;
    bool on;
    Because because;
    const char* why;
  };
  const std::vector<Case> cases = {
      {InPlaceNodes{3, 0, ""}, true, Because::kAllDeclare,
       "every one of the 3 ready, schedulable nodes declares "
       "RestartAllContainersOnContainerExits: gangs restart in place"},
      {InPlaceNodes{1, 0, ""}, true, Because::kAllDeclare,
       "the 1 ready, schedulable node declares RestartAllContainersOnContainerExits"},
      {InPlaceNodes{2, 1, "node-c"}, false, Because::kSomeLack,
       "node node-c of the 3 ready, schedulable nodes does not declare "
       "RestartAllContainersOnContainerExits"},
      {InPlaceNodes{1, 3, "node-b"}, false, Because::kSomeLack,
       "node node-b and 2 more of the 4 ready, schedulable nodes do not declare"},
      {InPlaceNodes{0, 2, "node-a"}, false, Because::kNoneDeclares,
       "none of the 2 ready, schedulable nodes declares RestartAllContainersOnContainerExits: "
       "gangs are made again"},
      {InPlaceNodes{0, 1, "node-a"}, false, Because::kNoneDeclares,
       "the 1 ready, schedulable node (node-a) does not declare"},
      {InPlaceNodes{}, false, Because::kNoNodes, "no node is ready and schedulable"},
      {std::nullopt, false, Because::kNodesNotWatched,
       "the operator does not watch nodes (it may not list them)"},
  };
  for (const Case& c : cases) {
    const InPlaceChoice choice = ChooseInPlace(c.nodes);
    EXPECT_EQ(choice.on, c.on) << c.why;
    EXPECT_EQ(choice.because, c.because) << c.why;
    EXPECT_NE(choice.why.find(c.why), std::string::npos) << choice.why;
  }
}

// The default tolerations Kubernetes gives every pod (DefaultTolerationSeconds).
std::vector<Toleration> DefaultTolerations() {
  return {{"node.kubernetes.io/not-ready", "Exists", "", "NoExecute", 300},
          {"node.kubernetes.io/unreachable", "Exists", "", "NoExecute", 300}};
}

struct JudgeCase {
  const char* name;
  json node;
  std::vector<Toleration> tolerations;
  bool lost;
  std::optional<kube::WallTime> since;  // of the loss
  bool not_ready;
  std::optional<kube::WallTime> lost_at;  // not lost yet, but then
  const char* why;                        // a part of NodeLoss::why
};

std::vector<JudgeCase> JudgeCases() {
  const auto ago = [](int s) { return kNow - seconds(s); };
  std::vector<Toleration> maintenance_60 = DefaultTolerations();
  maintenance_60.push_back({"maintenance", "Exists", "", "NoExecute", 60});
  std::vector<Toleration> maintenance_forever = DefaultTolerations();
  maintenance_forever.push_back({"maintenance", "", "now", "NoExecute", std::nullopt});
  std::vector<Toleration> maintenance_0 = DefaultTolerations();
  maintenance_0.push_back({"maintenance", "Exists", "", "NoExecute", 0});
  // The first toleration that tolerates a taint is the one taken, as Kubernetes' taint
  // eviction takes it: here the one of 60 s, not the one of forever after it.
  std::vector<Toleration> first_wins = maintenance_60;
  first_wins.push_back({"", "Exists", "", "", std::nullopt});
  return {
      {"Ready", WholeNode("True", ago(600)), DefaultTolerations(), false, {}, false, {}, ""},
      {"ReadyUnknown",
       WholeNode("Unknown", ago(60)),
       DefaultTolerations(),
       true,
       ago(60),
       true,
       {},
       "is not ready (Ready Unknown since 2023-11-14T22:12:20Z: NodeStatusUnknown)"},
      {"ReadyFalseWhateverThePodTolerates",
       WholeNode("False", ago(5)),
       {{"", "Exists", "", "", std::nullopt}},
       true,
       ago(5),
       true,
       {},
       "Ready False"},
      {"NoReadyConditionYet",
       {{"metadata", {{"name", "node-a"}}},
        {"spec", {{"taints", json::array({NoExecute("x", ago(9))})}}}},
       {},
       false,
       {},
       false,
       {},
       ""},
      {"UntoleratedNoExecuteTaint",
       WholeNode("True", ago(600), json::array({NoExecute("example.com/broken", ago(30), "yes")})),
       DefaultTolerations(),
       true,
       ago(30),
       false,
       {},
       "has the taint example.com/broken=yes:NoExecute, which the pod does not tolerate"},
      {"NoScheduleTaintsDoNotCount",
       WholeNode(
           "True", ago(600),
           json::array({{{"key", "node.kubernetes.io/unschedulable"}, {"effect", "NoSchedule"}},
                        {{"key", "x"}, {"effect", "PreferNoSchedule"}}})),
       {},
       false,
       {},
       false,
       {},
       ""},
      {"ToleratedForAWhile",
       WholeNode("True", ago(600), json::array({NoExecute("maintenance", ago(10))})),
       maintenance_60,
       false,
       {},
       false,
       kNow + seconds(50),
       ""},
      {"ToleratedUntilItsTimeIsUp",
       WholeNode("True", ago(600), json::array({NoExecute("maintenance", ago(60))})),
       maintenance_60,
       true,
       kNow,
       false,
       {},
       "which the pod tolerates for 60s"},
      {"ToleratedForZeroSeconds",
       WholeNode("True", ago(600), json::array({NoExecute("maintenance", ago(1))})),
       maintenance_0,
       true,
       ago(1),
       false,
       {},
       "tolerates for 0s"},
      {"ToleratedForever",
       WholeNode("True", ago(600), json::array({NoExecute("maintenance", ago(9999), "now")})),
       maintenance_forever,
       false,
       {},
       false,
       {},
       ""},
      {"TheFirstTolerationThatMatchesIsTaken",
       WholeNode("True", ago(600), json::array({NoExecute("maintenance", ago(61))})),
       first_wins,
       true,
       ago(1),
       false,
       {},
       "tolerates for 60s"},
      {"ATaintWithoutTimeAddedCannotBeTimed",
       WholeNode("True", ago(600), json::array({NoExecute("maintenance", std::nullopt)})),
       maintenance_60,
       false,
       {},
       false,
       {},
       ""},
      {"TheEarliestOfTwoLossesDecides",
       WholeNode("True", ago(600),
                 json::array({NoExecute("late", ago(5)), NoExecute("early", ago(50))})),
       {},
       true,
       ago(50),
       false,
       {},
       "early:NoExecute"},
  };
}

class JudgeNodeTest : public ::testing::TestWithParam<JudgeCase> {};

TEST_P(JudgeNodeTest, Table) {
  const JudgeCase& c = GetParam();
  const NodeJudgement j = JudgeNode(ViewOfNode(c.node), c.tolerations, kNow);
  ASSERT_EQ(j.lost.has_value(), c.lost);
  EXPECT_EQ(j.lost_at, c.lost_at);
  if (!c.lost) return;
  EXPECT_EQ(j.lost->since, c.since);
  EXPECT_EQ(j.lost->not_ready, c.not_ready);
  EXPECT_NE(j.lost->why.find(c.why), std::string::npos) << j.lost->why;
}

INSTANTIATE_TEST_SUITE_P(Nodes, JudgeNodeTest, ::testing::ValuesIn(JudgeCases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tj::controller
