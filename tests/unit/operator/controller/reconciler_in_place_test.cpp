// Gang restarts in place (ReconcilerOptions::restart_in_place): the restart rules a gang pod
// is built with, the choice of each gang from the nodes (Pass::GangRestartsInPlace, ChooseInPlace),
// and how the reconciler counts the restarts the kubelet does (Pass::ChargeInPlaceRestarts in
// reconciler_gang.cpp).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

ReconcilerOptions InPlace() {
  ReconcilerOptions o = JudgedAtOnce();
  o.restart_in_place = true;
  return o;
}

// Three nodes that take new pods, `lacking` of them without the feature.
InPlaceNodes Nodes(int64_t lacking) { return {3 - lacking, lacking, lacking > 0 ? "node-c" : ""}; }

// Pod `i` of `w`'s gang with its trainer container restarted `n` times in place.
void RestartedInPlace(World& w, size_t i, int n) {
  w.in.pods[i]["status"]["containerStatuses"] =
      json::array({{{"name", "trainer"},
                    {"restartCount", n},
                    {"state", {{"running", {{"startedAt", kube::FormatTime(kT0)}}}}}}});
}

const json& TrainerOf(const json& pod) { return pod["spec"]["containers"][0]; }

TEST(InPlaceRules, RetryTheCodesTheRestartPolicyRetries) {
  const json exit_code = InPlaceRestartRules(api::RestartPolicy::kExitCode);
  EXPECT_EQ(exit_code["restartPolicy"], "Never");
  const json& rule = exit_code["restartPolicyRules"][0];
  EXPECT_EQ(rule["action"], "RestartAllContainers");
  EXPECT_EQ(rule["exitCodes"]["operator"], "In");
  const json& codes = rule["exitCodes"]["values"];
  ASSERT_EQ(codes.size(), 129u);  // 75 and 128..255: the API server takes at most 255
  EXPECT_EQ(codes.front(), 75);
  EXPECT_EQ(codes[1], 128);
  EXPECT_EQ(codes.back(), 255);
  for (auto p : {api::RestartPolicy::kOnFailure, api::RestartPolicy::kAlways}) {
    const json r = InPlaceRestartRules(p)["restartPolicyRules"][0]["exitCodes"];
    EXPECT_EQ(r, json({{"operator", "NotIn"}, {"values", {0}}}));
  }
  EXPECT_TRUE(InPlaceRestartRules(api::RestartPolicy::kNever).is_null());
}

TEST(InPlaceRules, OnTheGangsTrainersOnlyAndNeverOverATemplatesOwnPolicy) {
  World w;
  auto spec = api::ParseSpec(w.in.job["spec"]);
  ASSERT_TRUE(spec.ok());
  const json worker = BuildPod(w.in.job, *spec, ReplicaType::kWorker, 0, 0, "", true);
  EXPECT_EQ(TrainerOf(worker)["restartPolicyRules"][0]["action"], "RestartAllContainers");
  EXPECT_EQ(worker["spec"]["restartPolicy"], "Never");  // the pod's own: nothing else restarts
  EXPECT_FALSE(TrainerOf(BuildPod(w.in.job, *spec, ReplicaType::kWorker, 0, 0, "", false))
                   .contains("restartPolicyRules"));
  json own = w.in.job;
  own["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["restartPolicy"] =
      "Never";
  auto own_spec = api::ParseSpec(own["spec"]);
  ASSERT_TRUE(own_spec.ok());
  EXPECT_FALSE(TrainerOf(BuildPod(own, *own_spec, ReplicaType::kWorker, 0, 0, "", true))
                   .contains("restartPolicyRules"));
  // The reconciler asks for them for the chief and workers, not for the evaluator.
  World fresh;
  fresh.in.in_place_nodes = Nodes(0);
  Decision d = Reconcile(fresh.in, InPlace());
  int with_rules = 0, created = 0;
  for (const Action& a : d.actions) {
    if (a.kind != Action::Kind::kCreate || a.resource.plural != "pods") continue;
    ++created;
    const json pod = ObjectOf(a);
    const bool rules = TrainerOf(pod).contains("restartPolicyRules");
    EXPECT_EQ(rules, a.name.find("evaluator") == std::string::npos) << a.name;
    with_rules += rules ? 1 : 0;
  }
  EXPECT_EQ(created, 3);
  EXPECT_EQ(with_rules, 2);
}

// The pods a pass creates, by name: whether each has the in-place rules and the label.
struct Made {
  bool rules = false, label = false;
  bool operator==(const Made&) const = default;
};
std::map<std::string, Made> PodsMade(const Decision& d) {
  std::map<std::string, Made> out;
  for (const Action& a : d.actions) {
    if (a.kind != Action::Kind::kCreate || a.resource.plural != "pods") continue;
    const json pod = ObjectOf(a);
    out[a.name] = {TrainerOf(pod).contains("restartPolicyRules"),
                   pod["metadata"]["labels"].value(kLabelRestartInPlace, "") == "true"};
  }
  return out;
}

const Made kInPlace{true, true}, kMadeAgain{false, false};

TEST(InPlaceChoice, ANewGangRestartsInPlaceOnlyWhenEveryNodeThatTakesPodsDeclaresTheFeature) {
  struct Case {
    const char* name;
    bool allowed;                       // ReconcilerOptions::restart_in_place
    std::optional<InPlaceNodes> nodes;  // Observed::in_place_nodes
    bool in_place;
  };
  const std::vector<Case> cases = {
      {"EveryNodeDeclares", true, Nodes(0), true},
      {"OneNodeLacks", true, Nodes(1), false},
      {"NoNodeDeclares", true, Nodes(3), false},
      {"NoNodeTakesPods", true, InPlaceNodes{}, false},
      {"NodesNotWatched", true, std::nullopt, false},
      {"NotAllowed", false, Nodes(0), false},
  };
  for (const Case& c : cases) {
    World w;
    w.in.in_place_nodes = c.nodes;
    ReconcilerOptions o = InPlace();
    o.restart_in_place = c.allowed;
    const Made gang = c.in_place ? kInPlace : kMadeAgain;
    EXPECT_EQ(
        PodsMade(Reconcile(w.in, o)),
        (std::map<std::string, Made>{
            {"mnist-evaluator-0", kMadeAgain}, {"mnist-worker-0", gang}, {"mnist-worker-1", gang}}))
        << c.name;
  }
}

// A gang whose pods were not all made at once (a create refused, the operator restarted) gets
// its other pods as its first ones were made, whatever the nodes say now: every pod of a gang
// is alike.
TEST(InPlaceChoice, TheRestOfAGangIsMadeAsItsFirstPodsWere) {
  for (bool first_in_place : {true, false}) {
    World w;
    w.Running();
    w.in.job["status"].erase("createdGeneration");  // the pass that made worker 0 said nothing
    auto spec = api::ParseSpec(w.in.job["spec"]);
    ASSERT_TRUE(spec.ok());
    json worker0 =
        BuildPod(w.in.job, *spec, ReplicaType::kWorker, 0, 0, KeyHash("k"), first_in_place);
    worker0["status"] = {{"phase", "Pending"}};
    w.in.pods = {worker0, w.in.pods[2]};                  // worker 0 and the evaluator
    w.in.in_place_nodes = Nodes(first_in_place ? 1 : 0);  // the nodes would say otherwise now
    const std::map<std::string, Made> made = PodsMade(Reconcile(w.in, InPlace()));
    EXPECT_EQ(
        made,
        (std::map<std::string, Made>{{"mnist-worker-1", first_in_place ? kInPlace : kMadeAgain}}))
        << "first in place: " << first_in_place;
  }
}

// Each gang chooses anew when it is made: one made again after a node without the feature
// joined restarts by being made again.
TEST(InPlaceChoice, AGangMadeAgainChoosesAfresh) {
  World w;
  w.Running();
  for (int i : {0, 1}) w.in.pods[i]["metadata"]["labels"][kLabelRestartInPlace] = "true";
  w.in.pods.erase(w.in.pods.begin() + 1);  // worker 1 deleted: the gang is made again
  w.in.in_place_nodes = Nodes(1);
  Decision d = Reconcile(w.in, InPlace());
  ASSERT_EQ(StatusOf(d).restart_count, 1);
  w.Keep(d);
  w.in.pods.erase(w.in.pods.begin());  // the old gang gone, the evaluator left
  w.in.now += seconds(120);            // the backoff passed
  EXPECT_EQ(PodsMade(Reconcile(w.in, InPlace())),
            (std::map<std::string, Made>{{"mnist-worker-0", kMadeAgain},
                                         {"mnist-worker-1", kMadeAgain}}));
  w.in.in_place_nodes = Nodes(0);
  EXPECT_EQ(PodsMade(Reconcile(w.in, InPlace()))["mnist-worker-0"], kInPlace);
}

TEST(InPlace, ARestartTheKubeletDidIsCountedOnceAsAGangRestartOfTheProgram) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 3}};
  w.Running();
  RestartedInPlace(w, 0, 1);  // the chief lost its peer
  RestartedInPlace(w, 1, 1);  // the worker that was killed
  Decision d = Reconcile(w.in, InPlace());
  const auto s = StatusOf(d);
  EXPECT_EQ(s.restart_count, 0);  // the same gang: its pods are kept
  EXPECT_EQ(s.restarts.in_place, 1);
  EXPECT_EQ(s.restarts.in_place_of_gang, 1);
  EXPECT_EQ(s.restarts.backoff_limit_used, 1);
  EXPECT_EQ(s.restarts.by_cause, (std::map<std::string, int32_t>{{"Failed", 1}}));
  EXPECT_EQ(d.status->at("restarts")["total"], 1);
  EXPECT_TRUE(Deleted(d).empty()) << ::testing::PrintToString(Deleted(d));
  EXPECT_TRUE(Created(d).empty()) << ::testing::PrintToString(Created(d));
  const Action* e = FindEvent(d, "GangRestartedInPlace");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("1 of backoffLimit 3"), std::string::npos) << e->message;
  ASSERT_TRUE(s.goodput.lost.contains("Failed"));
  EXPECT_EQ(s.goodput.lost.at("Failed").restarts, 1);
  // The next pass sees the same restarts: nothing more is counted.
  w.Keep(d);
  Decision again = Reconcile(w.in, InPlace());
  if (again.status) {
    EXPECT_EQ(StatusOf(again).restarts.in_place, 1);
  }
  EXPECT_EQ(FindEvent(again, "GangRestartedInPlace"), nullptr);
}

TEST(InPlace, PastTheBudgetTheJobFailsAndItsGangIsDeletedWhateverCleanPodPolicySays) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 1}, {"cleanPodPolicy", "None"}};
  w.Running();
  RestartedInPlace(w, 0, 2);
  RestartedInPlace(w, 1, 2);
  Decision d = Reconcile(w.in, InPlace());
  EXPECT_EQ(Cond(d, "Failed").reason, "BackoffLimitExceeded") << d.status->dump(2);
  EXPECT_EQ(StatusOf(d).restarts.in_place, 1);  // the first was within the budget
  // The kubelet would restart them again: they go, the evaluator stays (cleanPodPolicy None).
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-worker-0", "mnist-worker-1"}));
}

TEST(InPlace, AGangMadeAgainStartsCountingItsPodsRestartsAfresh) {
  World w;
  w.Running();
  RestartedInPlace(w, 0, 1);
  RestartedInPlace(w, 1, 1);
  Decision d = Reconcile(w.in, InPlace());
  w.Keep(d);
  // Then a worker is deleted: the gang is made again, and the new pods start at 0 restarts.
  w.in.pods.erase(w.in.pods.begin() + 1);
  Decision d2 = Reconcile(w.in, InPlace());
  const auto s = StatusOf(d2);
  EXPECT_EQ(s.restart_count, 1);
  EXPECT_EQ(s.restarts.in_place, 1);
  EXPECT_EQ(s.restarts.in_place_of_gang, 0);
  EXPECT_EQ(d2.status->at("restarts")["total"], 2);
}

}  // namespace
}  // namespace tj::controller
