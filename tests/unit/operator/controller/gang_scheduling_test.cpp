// The gang's PodGroups (operator/controller/gang_scheduling.h): what each scheduler's PodGroup
// and the rendered pods carry, and the rules of a pass that creates a gang
// (reconciler_gang_group.cpp): the group made before its pods, earlier ones deleted.
#include "operator/controller/gang_scheduling.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/test_job.h"

namespace tj::controller::gang {
namespace {

using nlohmann::json;

// TestJob with a chief and an evaluator beside its 2 workers, and `policy` as its
// runPolicy.schedulingPolicy (when not null).
json JobWith(const json& policy = json()) {
  json job = TestJob();
  json& rs = job["spec"]["replicaSpecs"];
  rs["Chief"] = rs["Worker"];
  rs["Chief"]["replicas"] = 1;
  rs["Evaluator"] = rs["Worker"];
  rs["Evaluator"]["replicas"] = 1;
  if (!policy.is_null()) job["spec"]["runPolicy"]["schedulingPolicy"] = policy;
  return job;
}

api::TrainingJobSpec SpecOf(const json& job) {
  auto spec = api::ParseSpec(job["spec"]);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return *spec;
}

// The pods a pass creates for gang `gang`: chief, 2 workers, evaluator.
Decision CreatesGang(const json& job, int gang) {
  const api::TrainingJobSpec spec = SpecOf(job);
  Decision d;
  auto create = [&](api::ReplicaType t, int i) {
    Action a;
    a.kind = Action::Kind::kCreate;
    a.resource = kube::resources::kPods;
    a.object = BuildPod(job, spec, t, i, gang);
    a.name = a.object["metadata"]["name"];
    d.actions.push_back(a);
  };
  create(api::ReplicaType::kChief, 0);
  create(api::ReplicaType::kWorker, 0);
  create(api::ReplicaType::kWorker, 1);
  create(api::ReplicaType::kEvaluator, 0);
  return d;
}

const json& PodNamed(const Decision& d, const std::string& name) {
  for (const Action& a : d.actions) {
    if (a.name == name) return a.object;
  }
  static const json kNone;
  ADD_FAILURE() << "no pod " << name;
  return kNone;
}

// A pass of `job` whose gang `gang` is to be created (the earlier gang gone), with the job's
// PodGroups of each watched kind as observed, on a cluster that serves native PodGroups or not.
Decision PassCreatingGang(const json& job, int gang, bool native_served,
                          std::map<std::string, std::vector<json>> watched = {}) {
  Observed in;
  in.job = job;
  in.new_rendezvous_key = "k";
  if (gang > 0) in.job["status"] = {{"restartCount", gang}};
  in.pod_groups = std::move(watched);
  ReconcilerOptions options;
  options.native_pod_groups = native_served;
  return Reconcile(in, options);
}

// "<apiVersion>/<plural> <name>" of the decision's creates (pods aside) and deletes, in order.
std::vector<std::string> GroupActions(const Decision& d) {
  std::vector<std::string> out;
  for (const Action& a : d.actions) {
    if (a.resource.plural != "podgroups") continue;
    out.push_back(std::string(a.kind == Action::Kind::kCreate ? "create " : "delete ") +
                  a.resource.api_version + " " + a.name);
  }
  return out;
}

// The pods the decision creates, as sent.
std::map<std::string, json> CreatedPods(const Decision& d) {
  std::map<std::string, json> out;
  for (const Action& a : d.actions) {
    if (a.kind == Action::Kind::kCreate && a.resource.plural == "pods") out[a.name] = ObjectOf(a);
  }
  return out;
}

TEST(GangScheduling, TheNativePodGroupHoldsTheChiefAndWorkersAndIsOwnedByTheJob) {
  const json job = JobWith();
  const json pg = BuildPodGroup(Kind::kNative, job, SpecOf(job), 0);
  EXPECT_EQ(pg["apiVersion"], "scheduling.k8s.io/v1beta1");
  EXPECT_EQ(pg["kind"], "PodGroup");
  EXPECT_EQ(pg["metadata"]["name"], "mnist-gang-0");
  EXPECT_EQ(pg["metadata"]["namespace"], "ns");
  EXPECT_EQ(pg["metadata"]["labels"]["tjo.dev/job-name"], "mnist");
  EXPECT_EQ(pg["metadata"]["labels"]["tjo.dev/restart-count"], "0");
  EXPECT_TRUE(IsOwnedBy(pg, job)) << pg.dump();
  // chief + 2 workers; the evaluator is not in the collective.
  EXPECT_EQ(pg["spec"], json::parse(R"({"schedulingPolicy": {"gang": {"minCount": 3}}})"));
}

TEST(GangScheduling, SchedulingPolicyReachesEachSchedulersPodGroup) {
  const json job = JobWith({{"gang", "Volcano"},
                            {"minAvailable", 2},
                            {"queue", "research"},
                            {"priorityClass", "high"},
                            {"scheduleTimeoutSeconds", 30}});
  const api::TrainingJobSpec spec = SpecOf(job);
  EXPECT_EQ(BuildPodGroup(Kind::kNative, job, spec, 1)["spec"],
            json::parse(R"({"schedulingPolicy": {"gang": {"minCount": 2}},
                            "priorityClassName": "high"})"));
  const json volcano = BuildPodGroup(Kind::kVolcano, job, spec, 1);
  EXPECT_EQ(volcano["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(volcano["spec"], json::parse(R"({"minMember": 2, "queue": "research",
                                             "priorityClassName": "high"})"));
  const json cosched = BuildPodGroup(Kind::kCoscheduling, job, spec, 1);
  EXPECT_EQ(cosched["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(cosched["spec"], json::parse(R"({"minMember": 2, "scheduleTimeoutSeconds": 30})"));
  EXPECT_EQ(cosched["metadata"]["name"], "mnist-gang-1");
}

TEST(GangScheduling, AutoIsNativeOnlyWhereServedAndNoneOptsOut) {
  EXPECT_EQ(KindFor(SpecOf(JobWith()), true), Kind::kNative);
  EXPECT_EQ(KindFor(SpecOf(JobWith()), false), std::nullopt);
  EXPECT_EQ(KindFor(SpecOf(JobWith({{"gang", "None"}})), true), std::nullopt);
  EXPECT_EQ(KindFor(SpecOf(JobWith({{"gang", "Volcano"}})), false), Kind::kVolcano);
  EXPECT_EQ(KindFor(SpecOf(JobWith({{"gang", "Coscheduling"}})), false), Kind::kCoscheduling);
}

TEST(GangScheduling, NamesFitALabelValueAndTellLongNamesApart) {
  const std::string a(60, 'a');
  const std::string b = std::string(59, 'a') + "b";
  const std::string na = PodGroupName(a, 12), nb = PodGroupName(b, 12);
  EXPECT_LE(na.size(), 63U) << na;
  EXPECT_NE(na, nb);
  EXPECT_EQ(na.substr(na.size() - 8), "-gang-12");
  EXPECT_EQ(PodGroupName("mnist", 3), "mnist-gang-3");
}

TEST(GangScheduling, RenderedPodsCarryWhatEachSchedulerReads) {
  const json job = JobWith();
  {
    Decision d = CreatesGang(job, 0);
    for (Action& a : d.actions) MarkMember(Kind::kNative, "g", a.object);
    EXPECT_EQ(PodNamed(d, "mnist-chief-0")["spec"]["schedulingGroup"],
              json::parse(R"({"podGroupName": "g"})"));
    EXPECT_EQ(PodNamed(d, "mnist-worker-1")["spec"]["schedulingGroup"]["podGroupName"], "g");
    EXPECT_FALSE(PodNamed(d, "mnist-evaluator-0")["spec"].contains("schedulingGroup"));
  }
  {
    Decision d = CreatesGang(job, 0);
    for (Action& a : d.actions) MarkMember(Kind::kVolcano, "g", a.object);
    const json& w = PodNamed(d, "mnist-worker-0");
    EXPECT_EQ(w["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "g");
    EXPECT_EQ(w["spec"]["schedulerName"], "volcano");
    EXPECT_FALSE(PodNamed(d, "mnist-evaluator-0")["spec"].contains("schedulerName"));
  }
  {
    json named = JobWith();
    named["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "my-volcano";
    Decision d = CreatesGang(named, 0);
    for (Action& a : d.actions) MarkMember(Kind::kVolcano, "g", a.object);
    EXPECT_EQ(PodNamed(d, "mnist-worker-0")["spec"]["schedulerName"], "my-volcano");
  }
  {
    Decision d = CreatesGang(job, 0);
    for (Action& a : d.actions) MarkMember(Kind::kCoscheduling, "g", a.object);
    EXPECT_EQ(PodNamed(d, "mnist-worker-0")["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"],
              "g");
    EXPECT_FALSE(PodNamed(d, "mnist-evaluator-0")["metadata"]["labels"].contains(
        "scheduling.x-k8s.io/pod-group"));
  }
}

// The pass that creates a gang's pods creates its PodGroup first (the executor sends the run of
// creates' other objects before its pods, and none of the pods when the group fails), and the
// pods, built when sent (Action::build), are its members: the evaluator is not.
TEST(GangGroupPass, TheGroupComesBeforeThePodsItsMembers) {
  const Decision d = PassCreatingGang(JobWith(), 0, /*native_served=*/true);
  EXPECT_EQ(GroupActions(d),
            std::vector<std::string>{"create scheduling.k8s.io/v1beta1 mnist-gang-0"});
  size_t group = d.actions.size(), first_pod = d.actions.size();
  for (size_t i = 0; i < d.actions.size(); ++i) {
    const Action& a = d.actions[i];
    if (a.kind != Action::Kind::kCreate) continue;
    if (a.resource.plural == "podgroups") group = i;
    if (a.resource.plural == "pods" && first_pod == d.actions.size()) first_pod = i;
  }
  EXPECT_LT(group, first_pod);
  const auto pods = CreatedPods(d);
  ASSERT_EQ(pods.size(), 4U);
  for (const auto& [name, pod] : pods) {
    if (name == "mnist-evaluator-0") {
      EXPECT_FALSE(pod["spec"].contains("schedulingGroup"));
    } else {
      EXPECT_EQ(pod["spec"]["schedulingGroup"]["podGroupName"], "mnist-gang-0") << name;
    }
  }
}

TEST(GangGroupPass, NothingWithoutTheApiOrWithTheOptOut) {
  for (const auto& [policy, served] :
       std::vector<std::pair<json, bool>>{{json(), false}, {{{"gang", "None"}}, true}}) {
    const Decision d = PassCreatingGang(JobWith(policy), 0, served);
    EXPECT_TRUE(GroupActions(d).empty()) << policy.dump();
    for (const auto& [name, pod] : CreatedPods(d)) {
      EXPECT_FALSE(pod["spec"].contains("schedulingGroup")) << name;
    }
  }
}

// Watched: the job's own earlier groups are deleted (not another job's, nor one already
// going), a group the job already owns is not created again.
TEST(GangGroupPass, ARestartMakesANewGroupAndDeletesTheEarlierOnes) {
  const json job = JobWith();
  auto group = [&](int n, const std::string& uid) {
    json g = BuildPodGroup(Kind::kNative, job, SpecOf(job), n);
    g["metadata"]["ownerReferences"][0]["uid"] = uid;
    return g;
  };
  json going = group(1, "uid-1");
  going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  const std::string native = kNativePodGroups.api_version;
  Decision d = PassCreatingGang(
      job, 2, true, {{native, {group(0, "uid-1"), going, group(0, "uid-of-another-job")}}});
  EXPECT_EQ(GroupActions(d),
            (std::vector<std::string>{"create scheduling.k8s.io/v1beta1 mnist-gang-2",
                                      "delete scheduling.k8s.io/v1beta1 mnist-gang-0"}));
  EXPECT_EQ(CreatedPods(d)["mnist-chief-0"]["spec"]["schedulingGroup"]["podGroupName"],
            "mnist-gang-2");
  d = PassCreatingGang(job, 2, true, {{native, {group(2, "uid-1")}}});
  EXPECT_TRUE(GroupActions(d).empty()) << "made by an earlier pass: not made again";
  EXPECT_EQ(CreatedPods(d).size(), 4U);
}

// Not watched (the operator may not list the kind): the previous gang's group is deleted by
// name, and a group that exists already is the executor's to check (its create's
// AlreadyExists: ExecutorPass.AGangsPodGroupOfAnotherOwnerHoldsThePodsBack).
TEST(GangGroupPass, UnwatchedTheEarlierGroupIsDeletedByName) {
  const Decision d = PassCreatingGang(JobWith({{"gang", "Volcano"}}), 3, false);
  EXPECT_EQ(GroupActions(d),
            (std::vector<std::string>{"create scheduling.volcano.sh/v1beta1 mnist-gang-3",
                                      "delete scheduling.volcano.sh/v1beta1 mnist-gang-2"}));
}

TEST(GangGroupPass, AGroupOfTheNameThatIsNotTheJobsStopsThePods) {
  const json job = JobWith();
  json theirs = BuildPodGroup(Kind::kNative, job, SpecOf(job), 0);
  theirs["metadata"]["ownerReferences"][0]["uid"] = "someone-else";
  const Decision d = PassCreatingGang(job, 0, true, {{kNativePodGroups.api_version, {theirs}}});
  std::vector<std::string> pods;
  for (const auto& [name, pod] : CreatedPods(d)) pods.push_back(name);
  EXPECT_EQ(pods, std::vector<std::string>{"mnist-evaluator-0"}) << "no member of the gang";
  EXPECT_TRUE(GroupActions(d).empty());
  const Action* said = nullptr;
  for (const Action& a : d.actions) {
    if (a.kind == Action::Kind::kEvent && a.reason == "PodGroupFailed") said = &a;
  }
  ASSERT_NE(said, nullptr);
  EXPECT_NE(said->message.find("mnist-gang-0 exists and this job does not own it"),
            std::string::npos)
      << said->message;
  EXPECT_TRUE(d.requeue_after.has_value());
}

}  // namespace
}  // namespace tj::controller::gang
