// The gang's PodGroups (operator/controller/gang_scheduling.h): what each scheduler's PodGroup
// and the rendered pods carry, and what Prepare asks of the API server before the pods.
#include "operator/controller/gang_scheduling.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator/controller/job_informers.h"
#include "operator/controller/job_resources.h"
#include "tests/support/accepting_client.h"
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

// Records creates, lists and deletes; Create answers `create_error` when set, Get `existing`.
class RecordingClient : public tj::testing::AcceptingClient {
 public:
  kube::Result<json> Create(const kube::Resource& r, const std::string& ns,
                            const json& object) override {
    created.push_back({{"resource", r.api_version + "/" + r.plural}, {"object", object}});
    if (create_error) return *create_error;
    return AcceptingClient::Create(r, ns, object);
  }
  kube::Result<json> Get(const kube::Resource& r, const std::string& ns,
                         const std::string& name) override {
    ++gets;
    if (!existing.is_null()) return existing;
    return AcceptingClient::Get(r, ns, name);
  }
  kube::Result<json> List(const kube::Resource&, const std::string&,
                          const kube::ListOptions& o) override {
    selectors.push_back(o.label_selector);
    return json{{"items", listed}};
  }
  kube::Result<json> Delete(const kube::Resource& r, const std::string&, const std::string& name,
                            const kube::DeleteOptions&) override {
    deleted.push_back(r.api_version + "/" + r.plural + " " + name);
    return json::object();
  }
  kube::Result<json> Raw(const std::string& method, const std::string& path,
                         const std::optional<json>&) override {
    raw.push_back(method + " " + path);
    if (path.find("?limit=") != std::string::npos) {  // a list
      if (list_error) return *list_error;
      return json{{"items", json::array()}};
    }
    if (discovery.is_null()) return tj::testing::ApiErrorOf(404, "NotFound", "not found");
    return discovery;
  }

  std::vector<json> created;
  std::vector<std::string> deleted, selectors, raw;
  std::optional<kube::ApiError> create_error, list_error;
  json existing, listed = json::array(), discovery;
  int gets = 0;
};

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

// The reconciler's pod creates are built when sent (Action::build): Prepare reads their
// placement labels without building them and marks each pod as it is built.
TEST(GangScheduling, PrepareMarksThePodsTheReconcilerBuildsWhenSent) {
  RecordingClient client;
  Observed in;
  in.job = JobWith();
  in.new_rendezvous_key = "k";
  Decision d = Reconcile(in);
  ASSERT_TRUE(Prepare(client, nullptr, in.job, /*native_served=*/true, &d).ok());
  ASSERT_EQ(client.created.size(), 1U);
  EXPECT_EQ(client.created[0]["object"]["metadata"]["name"], "mnist-gang-0");
  int members = 0, pods = 0;
  for (const Action& a : d.actions) {
    if (a.kind != Action::Kind::kCreate || a.resource.plural != "pods") continue;
    ++pods;
    ASSERT_TRUE(static_cast<bool>(a.build)) << a.name;
    const json pod = ObjectOf(a);
    EXPECT_EQ(pod["metadata"]["name"], a.name);
    if (a.name == "mnist-evaluator-0") {
      EXPECT_FALSE(pod["spec"].contains("schedulingGroup"));
    } else {
      EXPECT_EQ(pod["spec"]["schedulingGroup"]["podGroupName"], "mnist-gang-0") << a.name;
      ++members;
    }
  }
  EXPECT_EQ(pods, 4);
  EXPECT_EQ(members, 3);
}

TEST(GangScheduling, PrepareCreatesTheGangsPodGroupAndMarksItsPods) {
  RecordingClient client;
  const json job = JobWith();
  Decision d = CreatesGang(job, 0);
  ASSERT_TRUE(Prepare(client, nullptr, job, /*native_served=*/true, &d).ok());
  ASSERT_EQ(client.created.size(), 1U);
  EXPECT_EQ(client.created[0]["resource"], "scheduling.k8s.io/v1beta1/podgroups");
  EXPECT_EQ(client.created[0]["object"]["metadata"]["name"], "mnist-gang-0");
  EXPECT_EQ(PodNamed(d, "mnist-worker-0")["spec"]["schedulingGroup"]["podGroupName"],
            "mnist-gang-0");
  EXPECT_TRUE(client.deleted.empty());  // the first gang: nothing earlier
}

TEST(GangScheduling, PrepareChangesNothingWithoutTheApiOrWithTheOptOut) {
  for (const auto& [policy, served] :
       std::vector<std::pair<json, bool>>{{json(), false}, {{{"gang", "None"}}, true}}) {
    RecordingClient client;
    const json job = JobWith(policy);
    Decision d = CreatesGang(job, 0);
    const Decision before = d;
    ASSERT_TRUE(Prepare(client, nullptr, job, served, &d).ok());
    EXPECT_TRUE(client.created.empty());
    for (size_t i = 0; i < d.actions.size(); ++i) {
      EXPECT_EQ(d.actions[i].object, before.actions[i].object) << policy.dump();
    }
  }
}

TEST(GangScheduling, ARestartMakesANewGroupAndDeletesTheEarlierOnes) {
  RecordingClient client;
  const json job = JobWith();
  auto group = [&](int n, const std::string& uid) {
    json g = BuildPodGroup(Kind::kNative, job, SpecOf(job), n);
    g["metadata"]["ownerReferences"][0]["uid"] = uid;
    return g;
  };
  client.listed = json::array(
      {group(0, "uid-1"), group(1, "uid-1"), group(2, "uid-1"), group(0, "uid-of-another-job")});
  Decision d = CreatesGang(job, 2);
  ASSERT_TRUE(Prepare(client, nullptr, job, true, &d).ok());
  EXPECT_EQ(client.created[0]["object"]["metadata"]["name"], "mnist-gang-2");
  EXPECT_EQ(PodNamed(d, "mnist-chief-0")["spec"]["schedulingGroup"]["podGroupName"],
            "mnist-gang-2");
  EXPECT_EQ(client.selectors, std::vector<std::string>{"tjo.dev/job-name=mnist"});
  EXPECT_EQ(client.deleted,
            (std::vector<std::string>{"scheduling.k8s.io/v1beta1/podgroups mnist-gang-0",
                                      "scheduling.k8s.io/v1beta1/podgroups mnist-gang-1"}));
}

// Where the operator watches the kind's PodGroups, a gang restart reads the earlier groups and
// an existing one from the cache: no list, no get (one the cache does not show yet is read).
TEST(GangScheduling, WatchedPodGroupsAreReadFromTheCache) {
  RecordingClient client;
  const json job = JobWith();
  kube::ObjectCache cache;
  json other = BuildPodGroup(Kind::kNative, job, SpecOf(job), 0);
  other["metadata"]["namespace"] = "elsewhere";  // a job of the same name in another namespace
  for (const json& g : {BuildPodGroup(Kind::kNative, job, SpecOf(job), 0),
                        BuildPodGroup(Kind::kNative, job, SpecOf(job), 1), other}) {
    cache.Upsert(g);
  }
  client.create_error = tj::testing::ApiErrorOf(409, "AlreadyExists", "exists");
  Decision d = CreatesGang(job, 1);
  ASSERT_TRUE(Prepare(client, nullptr, job, true, &d, PodGroupCaches{.native = &cache}).ok());
  EXPECT_TRUE(client.selectors.empty()) << "a list of the PodGroups that are watched";
  EXPECT_EQ(client.gets, 0);
  EXPECT_EQ(client.deleted,
            std::vector<std::string>{"scheduling.k8s.io/v1beta1/podgroups mnist-gang-0"});
  // The cache does not show gang 2's group, made by a pass before: read from the API server.
  client.existing = BuildPodGroup(Kind::kNative, job, SpecOf(job), 2);
  Decision d2 = CreatesGang(job, 2);
  ASSERT_TRUE(Prepare(client, nullptr, job, true, &d2, PodGroupCaches{.native = &cache}).ok());
  EXPECT_EQ(client.gets, 1);
}

TEST(GangScheduling, AGroupOfTheNameThatIsNotTheJobsStopsThePods) {
  RecordingClient client;
  const json job = JobWith();
  client.create_error = tj::testing::ApiErrorOf(409, "AlreadyExists", "exists");
  client.existing = BuildPodGroup(Kind::kNative, job, SpecOf(job), 0);
  {
    Decision d = CreatesGang(job, 0);
    EXPECT_TRUE(Prepare(client, nullptr, job, true, &d).ok()) << "its own, from an earlier pass";
  }
  client.existing["metadata"]["ownerReferences"][0]["uid"] = "someone-else";
  Decision d = CreatesGang(job, 0);
  const Status s = Prepare(client, nullptr, job, true, &d);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mnist-gang-0 exists and this job does not own it"), std::string::npos)
      << s.message();
}

TEST(GangScheduling, AnUnservedOrForbiddenPodGroupApiIsSaidPlainly) {
  RecordingClient client;
  const json job = JobWith({{"gang", "Volcano"}});
  client.create_error = tj::testing::ApiErrorOf(404, "NotFound", "the server could not find");
  Decision d = CreatesGang(job, 0);
  Status s = Prepare(client, nullptr, job, false, &d);
  EXPECT_NE(s.message().find("does not serve scheduling.volcano.sh/v1beta1 podgroups"),
            std::string::npos)
      << s.message();
  client.create_error = tj::testing::ApiErrorOf(403, "Forbidden", "cannot create");
  s = Prepare(client, nullptr, job, false, &d);
  EXPECT_NE(s.message().find("forbidden"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("podgroups of scheduling.volcano.sh"), std::string::npos);
}

TEST(GangScheduling, DiscoveryFindsPodGroupsInTheServedVersion) {
  RecordingClient client;
  auto served = NativePodGroupsServed(client);
  ASSERT_TRUE(served.ok());
  EXPECT_FALSE(*served);  // 404: the version is off
  EXPECT_EQ(client.raw, std::vector<std::string>{"GET /apis/scheduling.k8s.io/v1beta1"});
  client.discovery = {{"resources", json::array({{{"name", "workloads"}}})}};
  EXPECT_FALSE(*NativePodGroupsServed(client));
  client.discovery["resources"].push_back({{"name", "podgroups"}});
  EXPECT_TRUE(*NativePodGroupsServed(client));
}

// The operator watches a kind of PodGroup only where the server serves it (discovery first: no
// list of an unserved kind reaches the audit log) and lets it be listed.
TEST(GangScheduling, APodGroupKindIsWatchedWhereServedAndListable) {
  RecordingClient client;
  const std::vector<const kube::Resource*> native = {&kNativePodGroups};
  auto w = Watchable(client, native, "");
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->watchable);
  EXPECT_EQ(w->why_not, "the API server serves no podgroups.scheduling.k8s.io/v1beta1");
  EXPECT_EQ(client.raw, std::vector<std::string>{"GET /apis/scheduling.k8s.io/v1beta1"});
  client.discovery = {{"resources", json::array({{{"name", "podgroups"}}})}};
  client.list_error = tj::testing::ApiErrorOf(403, "Forbidden", "cannot list");
  w = Watchable(client, native, "team-a");
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->watchable);
  EXPECT_EQ(w->why_not, "the operator may not list podgroups.scheduling.k8s.io/v1beta1");
  EXPECT_EQ(client.raw.back(),
            "GET /apis/scheduling.k8s.io/v1beta1/namespaces/team-a/podgroups?limit=1");
  client.list_error.reset();
  w = Watchable(client, native, "");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->watchable);
}

}  // namespace
}  // namespace tj::controller::gang
