// Elastic gangs (operator/controller/reconciler_elastic.cpp, spec.elasticPolicy): the spec's
// rules; a gang whose pods find no node within scheduleTimeoutSeconds restarts with as many
// workers as were placed (cause Resized, never counted), or one size down when none was, never
// below minReplicas nor at a size that does not divide the shards; its pods and TF_CONFIG have
// the new size and TJ_ELASTIC_SHARDS the same shards; any other restart makes the full gang
// again; Kueue's Workload asks for the full gang with a minCount and its partial admission
// sizes the gang.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator/controller/kueue_admission.h"
#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

constexpr auto npos = std::string::npos;

// World's job made elastic: `max` workers first and at most, `min` at least.
json ElasticJob(int min, int max, const json& extra = json::object()) {
  json job = Job(max, false);
  job["spec"]["elasticPolicy"] = {{"minReplicas", min}, {"maxReplicas", max}};
  job["spec"]["elasticPolicy"].update(extra);
  return job;
}

std::string ParseError(const json& job) {
  auto spec = api::ParseSpec(job["spec"]);
  return spec.ok() ? "" : spec.status().message();
}

TEST(Elastic, TheSpecSaysWhichSizesTheGangMayTake) {
  auto spec = api::ParseSpec(ElasticJob(1, 4)["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->Replicas(ReplicaType::kWorker), 4);
  EXPECT_EQ(spec->elastic->shards, 4);
  EXPECT_EQ(spec->elastic->schedule_timeout_seconds, 60);
  EXPECT_EQ(spec->elastic->LargestSizeUpTo(3, 0), 2);  // 3 does not divide 4 shards
  EXPECT_EQ(spec->elastic->LargestSizeUpTo(1, 0), 1);

  // The Worker replicas (the API server's default: 1) are the first gang's size.
  json smaller_first = ElasticJob(1, 4);
  smaller_first["spec"]["replicaSpecs"]["Worker"]["replicas"] = 1;
  spec = api::ParseSpec(smaller_first["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->Replicas(ReplicaType::kWorker), 1);
  EXPECT_EQ(spec->elastic->max_replicas, 4);
  smaller_first["spec"]["replicaSpecs"]["Worker"]["replicas"] = 3;  // 3 does not divide 4
  EXPECT_NE(ParseError(smaller_first)
                .find("spec.replicaSpecs.Worker.replicas: 3 is not a size the elastic gang may "
                      "take"),
            npos)
      << ParseError(smaller_first);
  json no_max = ElasticJob(1, 2);
  no_max["spec"]["elasticPolicy"].erase("maxReplicas");
  EXPECT_NE(ParseError(no_max).find("spec.elasticPolicy.maxReplicas: required"), npos);

  json no_min = ElasticJob(1, 2);
  no_min["spec"]["elasticPolicy"].erase("minReplicas");
  EXPECT_NE(ParseError(no_min).find("spec.elasticPolicy.minReplicas: required"), npos);
  EXPECT_NE(ParseError(ElasticJob(3, 2)).find("spec.elasticPolicy.minReplicas: must be <= 2"),
            npos);
  // With a chief, 1 + 2 = 3 shards: one worker (2 replicas) cannot train them.
  json chief = ElasticJob(1, 2);
  chief["spec"]["replicaSpecs"]["Chief"] = {{"replicas", 1}, {"template", Template()}};
  EXPECT_NE(ParseError(chief).find("set shards to a multiple of each size the gang may take, "
                                   "e.g. 6"),
            npos)
      << ParseError(chief);
  chief["spec"]["elasticPolicy"]["shards"] = 6;
  EXPECT_EQ(ParseError(chief), "");
  EXPECT_NE(ParseError(ElasticJob(1, 2, {{"shards", 3}})).find("not a multiple"), npos);

  json rule = ElasticJob(1, 2);
  rule["spec"]["failurePolicy"] = {
      {"rules", json::array({{{"action", "FailJob"}, {"onCauses", json::array({"Resized"})}}})}};
  EXPECT_NE(ParseError(rule).find("onCauses[0]: must be one of"), npos);
}

// An elastic job's gang as the scheduler left it: every pod made `age` ago, those of
// `placed` bound to a node.
struct ElasticWorld : World {
  explicit ElasticWorld(json j, int gang = 0) {
    job = std::move(j);
    in.job = job;
    Running(gang);
    in.pods.clear();
    auto spec = api::ParseSpec(job["spec"]);
    for (int i = 0; i < spec->Replicas(ReplicaType::kWorker); ++i) {
      in.pods.push_back(Pod(in.job, ReplicaType::kWorker, i, gang, "Pending"));
    }
  }
  void Place(int worker) {
    in.pods[worker]["spec"]["nodeName"] = "node-a";
    in.pods[worker]["status"]["phase"] = "Running";
  }
  void Unschedulable(int worker) {
    in.pods[worker]["status"]["conditions"] =
        json::array({{{"type", "PodScheduled"},
                      {"status", "False"},
                      {"reason", "Unschedulable"},
                      {"message", "0/1 nodes are available: 1 Insufficient example.com/slot."}}});
  }
};

TEST(Elastic, AGangThatDoesNotFitGoesOnWithTheWorkersThatWerePlaced) {
  ElasticWorld w(ElasticJob(1, 2));
  w.Place(0);
  w.Unschedulable(1);
  w.in.now = kT0 + seconds(30);
  Decision d = Reconcile(w.in, JudgedAtOnce());
  EXPECT_TRUE(Deleted(d).empty());
  ASSERT_TRUE(d.requeue_after);
  EXPECT_LE(*d.requeue_after, seconds(31));  // the timeout's end brings a pass

  w.in.now = kT0 + seconds(61);
  d = Reconcile(w.in, JudgedAtOnce());
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-worker-0", "mnist-worker-1"}));
  api::TrainingJobStatus st = StatusOf(d);
  EXPECT_EQ(st.restart_count, 1);
  EXPECT_EQ(st.elastic_workers, 1);
  EXPECT_EQ(st.restarts.by_cause["Resized"], 1);
  EXPECT_EQ(st.restarts.backoff_limit_used, 0);  // never counted
  const Action* e = FindEvent(d, "GangResized");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("pod mnist-worker-1 found no node in 60s"), npos) << e->message;
  EXPECT_NE(e->message.find("Insufficient example.com/slot"), npos) << e->message;
  EXPECT_NE(e->message.find("restarting the gang with 1 of its 2 workers"), npos) << e->message;

  // The next gang: one worker, whose TF_CONFIG lists one, with the job's two shards.
  w.Keep(d);
  w.in.pods.clear();
  w.in.now = kT0 + seconds(300);  // past the restart backoff
  d = Reconcile(w.in, JudgedAtOnce());
  std::vector<json> pods;
  for (const Action& a : d.actions) {
    if (a.kind == Action::Kind::kCreate && a.resource.plural == "pods") pods.push_back(ObjectOf(a));
  }
  ASSERT_EQ(pods.size(), 1u) << ::testing::PrintToString(Created(d));
  std::map<std::string, std::string> env;
  for (const json& v : pods[0]["spec"]["containers"][0]["env"]) {
    env[v["name"]] = v.value("value", "");
  }
  EXPECT_EQ(json::parse(env["TF_CONFIG"])["cluster"]["worker"].size(), 1u);
  EXPECT_EQ(env["TJ_ELASTIC_SHARDS"], "2");
  EXPECT_EQ(StatusOf(d).elastic_workers, 1);
}

TEST(Elastic, AnyOtherRestartMakesTheFullGangAgain) {
  json job = ElasticJob(1, 2);
  ElasticWorld w(job, 1);
  w.in.job["status"]["elastic"] = {{"workers", 1}};
  w.in.pods = {Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Failed", 137)};
  Decision d = Reconcile(w.in, JudgedAtOnce());
  api::TrainingJobStatus st = StatusOf(d);
  EXPECT_EQ(st.restart_count, 2);
  EXPECT_EQ(st.elastic_workers, 2);
  EXPECT_EQ(st.restarts.by_cause["Failed"], 1);
}

TEST(Elastic, AGangScheduledAllOrNothingStepsDownToASizeThatTrainsTheShards) {
  ElasticWorld w(ElasticJob(1, 4));  // 4 shards: 4, 2 or 1 workers
  for (int i = 0; i < 4; ++i) w.Unschedulable(i);
  w.in.now = kT0 + seconds(61);
  Decision d = Reconcile(w.in, JudgedAtOnce());
  EXPECT_EQ(StatusOf(d).elastic_workers, 2);
}

TEST(Elastic, AtMinReplicasTheGangWaits) {
  ElasticWorld w(ElasticJob(2, 4));
  w.in.job["status"]["elastic"] = {{"workers", 2}};
  w.in.pods.resize(2);
  w.Place(0);
  w.Unschedulable(1);
  w.in.now = kT0 + seconds(600);
  Decision d = Reconcile(w.in, JudgedAtOnce());
  EXPECT_TRUE(Deleted(d).empty());
  EXPECT_EQ(StatusOf(d).restart_count, 0);
  EXPECT_EQ(FindEvent(d, "GangResized"), nullptr);
}

// A gang of one worker of two, running (gang 1), as after a shrink.
ElasticWorld ShrunkAndRunning() {
  ElasticWorld w(ElasticJob(1, 2), 1);
  w.in.job["status"]["elastic"] = {{"workers", 1}};
  w.in.job["status"]["restarts"] = {{"backoffLimitUsed", 0}, {"byCause", {{"Resized", 1}}}};
  w.in.pods.resize(1);
  w.Place(0);
  return w;
}

TEST(Elastic, AShrunkGangProbesForRoomAndGrowsBackWhenAProbeIsPlaced) {
  ElasticWorld w = ShrunkAndRunning();
  Decision d = Reconcile(w.in, JudgedAtOnce());
  EXPECT_TRUE(Deleted(d).empty());
  json probe;
  for (const Action& a : d.actions) {
    if (a.kind == Action::Kind::kCreate && a.name == "mnist-probe-1") probe = ObjectOf(a);
  }
  ASSERT_TRUE(probe.is_object()) << ::testing::PrintToString(Created(d));
  EXPECT_EQ(probe["metadata"]["labels"]["tjo.dev/capacity-probe"], "1");
  EXPECT_EQ(probe["metadata"]["labels"]["tjo.dev/job-name"], "mnist");
  EXPECT_FALSE(probe["metadata"]["labels"].contains("tjo.dev/replica-type"));
  EXPECT_EQ(probe["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  const json& c = probe["spec"]["containers"][0];
  EXPECT_EQ(c["command"], json::array({"sleep", "infinity"}));
  EXPECT_FALSE(c.contains("env"));  // no TF_CONFIG, no rendezvous key
  EXPECT_FALSE(c.contains("args"));
  EXPECT_EQ(c["image"], "tj-trainer");  // the worker's image: nothing else to pull
  EXPECT_FALSE(probe["spec"].contains("hostname"));
  EXPECT_EQ(probe["spec"]["terminationGracePeriodSeconds"], 0);
  EXPECT_EQ(StatusOf(d).restart_count, 1);

  // Pending, it waits; placed, the gang restarts with two workers and the probe goes.
  probe["metadata"]["creationTimestamp"] = kube::FormatTime(kT0);
  probe["status"] = {{"phase", "Pending"}};
  w.in.pods.push_back(probe);
  d = Reconcile(w.in, JudgedAtOnce());
  EXPECT_TRUE(Deleted(d).empty());
  EXPECT_TRUE(Created(d).empty()) << ::testing::PrintToString(Created(d));
  w.in.pods.back()["spec"]["nodeName"] = "node-b";
  d = Reconcile(w.in, JudgedAtOnce());
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-worker-0", "mnist-probe-1"}));
  const api::TrainingJobStatus st = StatusOf(d);
  EXPECT_EQ(st.restart_count, 2);
  EXPECT_EQ(st.elastic_workers, 2);
  EXPECT_EQ(st.restarts.by_cause.at("Resized"), 2);
  EXPECT_EQ(st.restarts.backoff_limit_used, 0);
  const Action* e = FindEvent(d, "GangResized");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("1 capacity probe found room for more workers; restarting the gang "
                            "with 2 of its 2 workers"),
            npos)
      << e->message;
}

TEST(Elastic, ProbesGoWhenTheGangIsNotShrunkOrTheJobHasFinished) {
  ElasticWorld w = ShrunkAndRunning();
  json probe = BuildCapacityProbe(w.in.job, *api::ParseSpec(w.in.job["spec"]), 1);
  w.in.pods.push_back(probe);
  w.in.job["status"]["elastic"] = {{"workers", 2}};  // full-size again
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Running");
  w.in.pods.insert(w.in.pods.begin() + 1, Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Running"));
  Decision d = Reconcile(w.in, JudgedAtOnce());
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-probe-1"}));

  ElasticWorld done = ShrunkAndRunning();
  done.in.pods.push_back(probe);
  done.in.job["status"]["conditions"].push_back({{"type", "Succeeded"},
                                                 {"status", "True"},
                                                 {"reason", "JobSucceeded"},
                                                 {"message", "done"},
                                                 {"lastTransitionTime", kube::FormatTime(kT0)}});
  done.in.job["spec"]["runPolicy"] = {{"cleanPodPolicy", "None"}};
  d = Reconcile(done.in, JudgedAtOnce());
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-probe-1"}));
}

TEST(Elastic, TheWorkloadAsksForTheFullGangAndAPartialAdmissionSizesIt) {
  json job = ElasticJob(1, 4);
  job["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "q"}};
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok());
  spec->replica_specs[ReplicaType::kWorker].replicas = 1;  // a pass of a shrunk gang
  const json wl = kueue::BuildWorkload(job, *spec);
  const json& worker = wl["spec"]["podSets"][0];
  EXPECT_EQ(worker["name"], "worker");
  EXPECT_EQ(worker["count"], 4);
  EXPECT_EQ(worker["minCount"], 1);

  json admitted = wl;
  admitted["status"]["admission"] = {
      {"clusterQueue", "cq"},
      {"podSetAssignments", json::array({{{"name", "worker"}, {"count", 3}}})}};
  spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(kueue::ApplyAssignment(admitted, {}, *spec).ok());
  EXPECT_EQ(spec->Replicas(ReplicaType::kWorker), 2);  // 3 granted; 2 divides the 4 shards
}

}  // namespace
}  // namespace tj::controller
