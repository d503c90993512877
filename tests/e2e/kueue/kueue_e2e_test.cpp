// TrainingJobs queued by Kueue (docs/kueue.md), on the local cluster with Kueue installed by
// hack/kueue.sh (its manager built from the Go module proxy, its own manifests):
//   - a job labelled kueue.x-k8s.io/queue-name starts no pod while its ClusterQueue holds
//     (stopPolicy Hold): its condition Admitted=False and state Queued say why, an Event too;
//     once the queue admits it, the whole gang starts, with the flavor's node labels in the
//     pods' nodeSelector, its toleration and the label kueue.x-k8s.io/podset;
//   - two jobs that together exceed the queue's quota run one after the other: the second has
//     no pod until the first has finished, says why (Kueue's message about the quota it lacks),
//     and then runs to success; each job's Workload ends Finished;
//   - preemption at no cost: in a ClusterQueue that fits one job and preempts lower priorities,
//     a high-priority job evicts a running low-priority one. The low job's trainers back up the
//     step they stop at and exit; it waits Queued, its restart counted as Preempted and not
//     against backoffLimit (0 here: a counted restart would fail it); once the high job has
//     finished Kueue admits it again and it resumes from exactly that step, and succeeds;
//   - the priority boost: of two running jobs of one priority, Kueue preempts the one with
//     the least work since its last backup, though it was admitted first.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/support/e2e_support.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::Eventually;
using testing::Kubectl;
using testing::ScaledExample;
using testing::SetArg;
using testing::Sh;
using testing::StatusOf;

// Kueue runs here with waitForPodsReady of this timeout (and recoveryTimeout): an admitted job
// whose PodsReady is not True in time is evicted.
constexpr seconds kPodsReadyTimeout{20};
// And with its DynamicResourceAllocation gate: the devices of class kGpuClass that a pod's
// resource claims ask for count as kGpuResource.
constexpr char kGpuClass[] = "gpu.tjo.dev";
constexpr char kGpuResource[] = "tjo.dev/gpu";
const Resource kWorkloads{"kueue.x-k8s.io/v1beta2", "workloads"};
const Resource kClusterQueues{"kueue.x-k8s.io/v1beta2", "clusterqueues", false};
const Resource kLocalQueues{"kueue.x-k8s.io/v1beta2", "localqueues"};
const Resource kResourceFlavors{"kueue.x-k8s.io/v1beta2", "resourceflavors", false};
const Resource kPriorityClasses{"kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", false};

constexpr char kNodeLabel[] = "tjo.dev/kueue-e2e-flavor";
constexpr char kQueueLabel[] = "kueue.x-k8s.io/queue-name";

class Kueue : public testing::JobTest {
 protected:
  void SetUp() override {
    TJ_REQUIRE_LOCAL_CLUSTER(cluster_);
    static std::string install_error = Install(cluster_);
    ASSERT_TRUE(install_error.empty()) << install_error;
    JobTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    // A flavor whose node label the node carries, with a toleration: both must reach the pods.
    Kubectl(cluster_, std::string("label node --all --overwrite ") + kNodeLabel + "=yes");
    flavor_ = ns_ + "-flavor";
    json rf = {
        {"apiVersion", "kueue.x-k8s.io/v1beta2"},
        {"kind", "ResourceFlavor"},
        {"metadata", {{"name", flavor_}}},
        {"spec",
         {{"nodeLabels", {{kNodeLabel, "yes"}}},
          {"tolerations",
           json::array(
               {{{"key", kNodeLabel}, {"operator", "Exists"}, {"effect", "NoSchedule"}}})}}}};
    auto created = client_->Create(kResourceFlavors, "", rf);
    ASSERT_TRUE(created.ok()) << created.error().message;
  }

  // Installs Kueue in the test binary's cluster once; "" when it runs, else what failed. With
  // waitForPodsReady (kPodsReadyTimeout): every test's admitted jobs must say PodsReady in time.
  static std::string Install(testing::LocalCluster* cluster) {
    const std::string out =
        Sh("TJ_LOCAL_CLUSTER_DIR='" + cluster->dir() +
               "' TJ_KUEUE_WAIT_FOR_PODS_READY=" + std::to_string(kPodsReadyTimeout.count()) +
               "s TJ_KUEUE_DEVICE_CLASSES=" + kGpuResource + "=" + kGpuClass +
               " TJ_KUEUE_FEATURE_GATES=PriorityBoost=true bash '" + TJ_SOURCE_DIR +
               "/hack/kueue.sh' install 2>&1; echo rc=$?",
           seconds(3600));
    if (out.find("rc=0") == std::string::npos) return "hack/kueue.sh install failed:\n" + out;
    return "";
  }

  // A ClusterQueue of `cpu` for this test's namespace, held (stopPolicy Hold) when `hold`,
  // preempting lower priorities within itself when `preempt`, and the LocalQueue "queue"
  // pointing at it.
  void MakeQueues(const std::string& cpu, bool hold, bool preempt = false,
                  const std::string& gpus = "") {
    cluster_queue_ = ns_ + "-cq";
    json cq = {
        {"apiVersion", "kueue.x-k8s.io/v1beta2"},
        {"kind", "ClusterQueue"},
        {"metadata", {{"name", cluster_queue_}}},
        {"spec",
         {{"namespaceSelector", {{"matchLabels", {{"kubernetes.io/metadata.name", ns_}}}}},
          {"stopPolicy", hold ? "Hold" : "None"},
          {"resourceGroups",
           json::array(
               {{{"coveredResources", json::array({"cpu", "memory"})},
                 {"flavors",
                  json::array({{{"name", flavor_},
                                {"resources", json::array({{{"name", "cpu"}, {"nominalQuota", cpu}},
                                                           {{"name", "memory"},
                                                            {"nominalQuota", "8Gi"}}})}}})}}})}}}};
    if (preempt) cq["spec"]["preemption"] = {{"withinClusterQueue", "LowerPriority"}};
    if (!gpus.empty()) {  // kGpuResource too, the devices resource claims ask for
      json& group = cq["spec"]["resourceGroups"][0];
      group["coveredResources"].push_back(kGpuResource);
      group["flavors"][0]["resources"].push_back({{"name", kGpuResource}, {"nominalQuota", gpus}});
    }
    auto c = client_->Create(kClusterQueues, "", cq);
    ASSERT_TRUE(c.ok()) << c.error().message;
    json lq = {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
               {"kind", "LocalQueue"},
               {"metadata", {{"name", "queue"}, {"namespace", ns_}}},
               {"spec", {{"clusterQueue", cluster_queue_}}}};
    auto l = client_->Create(kLocalQueues, ns_, lq);
    ASSERT_TRUE(l.ok()) << l.error().message;
  }

  void TearDown() override {
    if (HasFailure() && cluster_ != nullptr && !ns_.empty()) {
      std::cerr << Kubectl(cluster_, "-n " + ns_ + " get workloads.kueue.x-k8s.io -o yaml")
                << Kubectl(cluster_, "get clusterqueues -o yaml") << "\n";
    }
    JobTest::TearDown();
    if (cluster_ != nullptr && !ns_.empty()) {
      Kubectl(cluster_, "delete tj --all -n " + ns_ + " --wait=false");
      Kubectl(cluster_, "delete localqueue --all -n " + ns_ + " --wait=false");
      if (!cluster_queue_.empty())
        Kubectl(cluster_, "delete clusterqueue " + cluster_queue_ + " --wait=false");
      if (!flavor_.empty()) Kubectl(cluster_, "delete resourceflavor " + flavor_ + " --wait=false");
      for (const std::string& pc : priority_classes_) {
        Kubectl(cluster_, "delete workloadpriorityclass " + pc + " --wait=false");
      }
    }
  }

  // A small queued job (1 epoch; a chief-less gang of 2 workers and an evaluator, 100m CPU
  // each) whose files live under /data/<name>, apart from the other job's on the same claim.
  static json QueuedJob(const std::string& name, int steps, int save_freq) {
    json job = ScaledExample(1, steps, save_freq);
    job["metadata"]["name"] = name;
    job["metadata"]["labels"][kQueueLabel] = "queue";
    for (auto& [type, rs] : job["spec"]["replicaSpecs"].items()) {
      for (json& c : rs["template"]["spec"]["containers"]) {
        for (const char* flag : {"--backup-dir", "--checkpoint-dir", "--log-dir", "--export-dir"}) {
          for (size_t i = 0; i + 1 < c["args"].size(); ++i) {
            if (c["args"][i] == flag) {
              const std::string dir = c["args"][i + 1];
              SetArg(c["args"], flag, "/data/" + name + dir.substr(5));  // "/data/x" -> /data/<n>/x
            }
          }
        }
      }
    }
    return job;
  }

  json Workload(const std::string& job) {
    ListOptions o;
    o.label_selector = "tjo.dev/job-name=" + job;
    auto l = client_->List(kWorkloads, ns_, o);
    if (!l.ok() || (*l)["items"].empty()) return json();
    return (*l)["items"][0];
  }

  static std::string ConditionOf(const json& object, const std::string& type,
                                 const std::string& field) {
    if (!object.is_object()) return "";  // e.g. a Workload not made yet
    for (const json& c :
         object.value("status", json::object()).value("conditions", json::array())) {
      if (c.value("type", "") == type) return c.value(field, "");
    }
    return "";
  }

  std::vector<std::string> EventReasons(const std::string& job) {
    std::vector<std::string> out;
    ListOptions o;
    o.field_selector = "involvedObject.name=" + job;
    auto l = client_->List(resources::kEvents, ns_, o);
    if (!l.ok()) return out;
    for (const json& e : (*l)["items"]) out.push_back(e.value("reason", ""));
    return out;
  }

  // A WorkloadPriorityClass "<ns>-<name>" of `value`; its name.
  std::string MakePriorityClass(const std::string& name, int value) {
    std::string full = ns_ + "-" + name;
    json pc = {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
               {"kind", "WorkloadPriorityClass"},
               {"metadata", {{"name", full}}},
               {"value", value}};
    auto c = client_->Create(kPriorityClasses, "", pc);
    EXPECT_TRUE(c.ok()) << c.error().message;
    priority_classes_.push_back(full);
    return full;
  }

  std::string flavor_, cluster_queue_;
  std::vector<std::string> priority_classes_;
};

TEST_F(Kueue, AQueuedJobStartsNoPodBeforeAdmissionThenTheWholeGangWithTheAssignment) {
  MakeQueues("2", /*hold=*/true);
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, QueuedJob("held", 6, 6)).ok());

  // Held: Kueue does not admit; the job waits, says why, and has no pod.
  ASSERT_TRUE(Eventually([&] { return ConditionOf(Get("held"), "Admitted", "status") == "False"; },
                         seconds(60)))
      << Get("held").dump(2);
  ASSERT_FALSE(Workload("held").is_null()) << "the operator made no Workload";
  const json wl = Workload("held");
  EXPECT_EQ(wl["spec"]["queueName"], "queue");
  std::map<std::string, int> counts;
  for (const json& ps : wl["spec"]["podSets"]) counts[ps.value("name", "")] = ps.value("count", 0);
  EXPECT_EQ(counts, (std::map<std::string, int>{{"evaluator", 1}, {"worker", 2}})) << wl.dump(2);
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(Pods("held").empty()) << "a pod started before Kueue admitted the job";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  const json held = Get("held");
  EXPECT_EQ(held["status"].value("state", ""), "Queued") << held.dump(2);
  EXPECT_FALSE(ConditionOf(held, "Admitted", "message").empty()) << held.dump(2);
  EXPECT_TRUE(Eventually([&] {
    for (const std::string& r : EventReasons("held")) {
      if (r == "Queued") return true;
    }
    return false;
  }));

  // Released: the whole gang starts at once, with what the flavor assigns.
  Kubectl(cluster_, "patch clusterqueue " + cluster_queue_ +
                        " --type=merge -p '{\"spec\":{\"stopPolicy\":\"None\"}}'");
  ASSERT_TRUE(Eventually([&] { return Pods("held").size() == 3; }, seconds(60)))
      << Kubectl(cluster_, "-n " + ns_ + " get tj,pods,workloads.kueue.x-k8s.io");
  for (const json& pod : Pods("held")) {
    const std::string name = pod["metadata"]["name"];
    EXPECT_EQ(pod["spec"]["nodeSelector"].value(kNodeLabel, ""), "yes") << name;
    bool tolerated = false;
    for (const json& t : pod["spec"].value("tolerations", json::array())) {
      tolerated = tolerated || t.value("key", "") == kNodeLabel;
    }
    EXPECT_TRUE(tolerated) << name << ": " << pod["spec"].dump();
    const std::string podset = pod["metadata"]["labels"].value("kueue.x-k8s.io/podset", "");
    EXPECT_TRUE(podset == "worker" || podset == "evaluator") << name << ": " << podset;
  }
  EXPECT_EQ(ConditionOf(Get("held"), "Admitted", "status"), "True");
  const json done = WaitFinished("held", seconds(600));
  EXPECT_TRUE(StatusOf(done).IsTrue(api::condition::kSucceeded)) << done.dump(2);
  EXPECT_TRUE(Eventually(
      [&] { return ConditionOf(Workload("held"), "Finished", "status") == "True"; }, seconds(30)))
      << Workload("held").dump(2);
}

TEST_F(Kueue, TwoJobsBeyondTheQuotaRunOneAfterTheOther) {
  // 500m: one job's gang (3 pods of 100m) fits, two do not.
  MakeQueues("500m", /*hold=*/false);
  // The first trains for 10 s at least (6 backups held 2 s each), long enough for the second
  // to be queued behind it.
  json first_job = QueuedJob("first", 30, 5);
  testing::SetEnv(first_job, "Worker", "TJ_FAILPOINTS", testing::PaceFailpoint(2000));
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, first_job).ok());
  ASSERT_TRUE(Eventually([&] { return Pods("first").size() == 3; }, seconds(60)))
      << Kubectl(cluster_, "-n " + ns_ + " get tj,pods,workloads.kueue.x-k8s.io");
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, QueuedJob("second", 6, 6)).ok());

  // While the first runs, the second waits without a pod and says it lacks quota.
  ASSERT_TRUE(Eventually(
      [&] { return ConditionOf(Get("second"), "Admitted", "status") == "False"; }, seconds(60)));
  std::string said;
  ASSERT_TRUE(Eventually(
      [&] {
        said = ConditionOf(Get("second"), "Admitted", "message");
        return said.find("quota") != std::string::npos;
      },
      seconds(60)))
      << "the waiting job does not say it lacks quota: '" << said << "'";
  EXPECT_EQ(Get("second")["status"].value("state", ""), "Queued");
  json first;
  const auto deadline = std::chrono::steady_clock::now() + seconds(600);
  for (first = Get("first"); !StatusOf(first).Finished(); first = Get("first")) {
    ASSERT_TRUE(Pods("second").empty())
        << "the second job started a pod while the first ran: "
        << Kubectl(cluster_, "-n " + ns_ + " get tj,pods,workloads.kueue.x-k8s.io");
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the first job did not finish";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_TRUE(StatusOf(first).IsTrue(api::condition::kSucceeded)) << first.dump(2);
  bool said_pending = false;
  for (const std::string& r : EventReasons("second")) said_pending = said_pending || r == "Pending";
  EXPECT_TRUE(said_pending) << "no Pending Event on the waiting job";

  // The first's quota goes back: the second runs, and succeeds.
  EXPECT_TRUE(Eventually(
      [&] { return ConditionOf(Workload("first"), "Finished", "status") == "True"; }, seconds(30)));
  const json second = WaitFinished("second", seconds(600));
  EXPECT_TRUE(StatusOf(second).IsTrue(api::condition::kSucceeded)) << second.dump(2);
  EXPECT_EQ(ConditionOf(second, "Admitted", "status"), "True");
}

// An elastic job (1 to 2 workers) whose queue has room for one worker: its Workload asks for
// two with minCount 1, Kueue's partial admission grants one, and the job trains with one worker
// and succeeds, where a fixed-size gang would wait for quota that never comes.
TEST_F(Kueue, AnElasticJobTakesThePartialAdmissionKueueGrants) {
  // 200m: the evaluator and one worker (100m each), not the second worker.
  MakeQueues("200m", /*hold=*/false);
  json job = QueuedJob("elastic", 6, 6);
  job["spec"]["replicaSpecs"]["Worker"]["replicas"] = 2;
  job["spec"]["elasticPolicy"] = {{"minReplicas", 1}, {"maxReplicas", 2}};
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  json wl;
  ASSERT_TRUE(Eventually(
      [&] {
        wl = Workload("elastic");
        return ConditionOf(wl, "Admitted", "status") == "True";
      },
      seconds(120)))
      << wl.dump(2);
  for (const json& ps : wl["spec"]["podSets"]) {
    if (ps.value("name", "") != "worker") continue;
    EXPECT_EQ(ps.value("count", 0), 2) << ps.dump();
    EXPECT_EQ(ps.value("minCount", 0), 1) << ps.dump();
  }
  for (const json& psa : wl["status"]["admission"]["podSetAssignments"]) {
    if (psa.value("name", "") == "worker") {
      EXPECT_EQ(psa.value("count", 0), 1) << psa.dump();
    }
  }
  const json done = WaitFinished("elastic", seconds(600));
  EXPECT_TRUE(StatusOf(done).IsTrue(api::condition::kSucceeded)) << done.dump(2);
  EXPECT_EQ(StatusOf(done).elastic_workers, 1);
  EXPECT_EQ(StatusOf(done).restart_count, 0);
}

// Kueue's waitForPodsReady (here 20 s) evicts an admitted Workload whose PodsReady condition is
// not True in time. The operator sets it as Kueue's job framework does for its own kinds, so a
// job that trains well past the timeout runs to the end in one gang. Before, it set none: Kueue
// evicted every queued job 20 s after admission, and waitForPodsReady had to stay off.
TEST_F(Kueue, AJobThatRunsPastWaitForPodsReadysTimeoutIsNotEvicted) {
  MakeQueues("500m", /*hold=*/false);
  // Trains for 30 s at least (12 backups held 2.5 s each).
  json job = QueuedJob("ready", 60, 5);
  testing::SetEnv(job, "Worker", "TJ_FAILPOINTS", testing::PaceFailpoint(2500));
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  ASSERT_TRUE(Eventually(
      [&] { return ConditionOf(Workload("ready"), "PodsReady", "status") == "True"; }, seconds(60)))
      << Kubectl(cluster_, "-n " + ns_ + " get tj,pods,workloads.kueue.x-k8s.io -o yaml");
  EXPECT_EQ(ConditionOf(Workload("ready"), "PodsReady", "reason"), "Started");
  const json done = WaitFinished("ready", seconds(600));
  EXPECT_TRUE(StatusOf(done).IsTrue(api::condition::kSucceeded)) << done.dump(2);
  EXPECT_EQ(StatusOf(done).restart_count, 0) << "evicted while it ran: " << done.dump(2);
  EXPECT_EQ(ConditionOf(Workload("ready"), "Evicted", "status"), "") << Workload("ready").dump(2);
}

// runPolicy.suspend and the Workload's spec.active follow each other, as in Kueue's own
// integrations: a suspended job's Workload is deactivated and its quota freed, a resumed job's
// activated and admitted again; a Workload deactivated by someone else (an admin) suspends its
// job until it is active again. The job resumes from its backups each time and succeeds.
TEST_F(Kueue, SuspendAndTheWorkloadsActiveFollowEachOtherBothWays) {
  MakeQueues("500m", /*hold=*/false);
  json job = QueuedJob("pause", 60, 5);
  testing::SetEnv(job, "Worker", "TJ_FAILPOINTS", testing::PaceFailpoint(1500));
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  auto running = [&] { return Pods("pause").size() == 3; };
  ASSERT_TRUE(Eventually(running, seconds(60)));
  auto patch_job = [&](bool suspend) {
    auto r = client_->Patch(api::kTrainingJobs, ns_, "pause", PatchType::kMerge,
                            {{"spec", {{"runPolicy", {{"suspend", suspend}}}}}});
    ASSERT_TRUE(r.ok()) << r.error().message;
  };
  auto suspended_by = [&](const std::string& reason) {
    return ConditionOf(Get("pause"), "Suspended", "status") == "True" &&
           ConditionOf(Get("pause"), "Suspended", "reason") == reason && Pods("pause").empty();
  };
  auto active = [&] {
    const json w = Workload("pause");
    return w.is_object() && w.value("spec", json::object()).value("active", true);
  };
  auto quota_reserved = [&] {
    return ConditionOf(Workload("pause"), "QuotaReserved", "status") == "True";
  };

  // Suspended: the Workload is deactivated and its quota goes back.
  patch_job(true);
  EXPECT_TRUE(Eventually([&] { return suspended_by("JobSuspended"); }, seconds(60)));
  EXPECT_TRUE(Eventually([&] { return !active() && !quota_reserved(); }, seconds(60)))
      << Workload("pause").dump(2);
  // Resumed: active again, admitted, the gang back.
  patch_job(false);
  EXPECT_TRUE(Eventually([&] { return active() && quota_reserved() && running(); }, seconds(90)))
      << Workload("pause").dump(2);

  // An admin deactivates the Workload: the job is suspended by it until it is active again.
  auto set_active = [&](bool value) {
    auto r = client_->Patch(kWorkloads, ns_, Workload("pause")["metadata"].value("name", ""),
                            PatchType::kMerge, {{"spec", {{"active", value}}}});
    ASSERT_TRUE(r.ok()) << r.error().message;
  };
  set_active(false);
  EXPECT_TRUE(Eventually([&] { return suspended_by("WorkloadDeactivated"); }, seconds(60)))
      << Get("pause").dump(2);
  EXPECT_FALSE(active()) << "the operator undid another's deactivation";
  set_active(true);
  const json done = WaitFinished("pause", seconds(600));
  EXPECT_TRUE(StatusOf(done).IsTrue(api::condition::kSucceeded)) << done.dump(2);
  EXPECT_EQ(ConditionOf(done, "Suspended", "status"), "False");
}

// A pod's DRA resource claims count against the queue's quota (Kueue's DynamicResourceAllocation,
// its device class mapped to kGpuResource): the podSets carry them. A job whose two workers
// each claim one device of the class waits behind a quota of one, and is admitted at two.
// Before, the claims were left out of the podSets and such a job used no quota at all. (No
// DRA driver runs here: the pods are not expected to start, only the admission is checked.)
TEST_F(Kueue, ADraClaimCountsAgainstTheQueuesQuota) {
  MakeQueues("2", /*hold=*/false, /*preempt=*/false, /*gpus=*/"1");
  const Resource claim_templates{"resource.k8s.io/v1", "resourceclaimtemplates"};
  json tmpl = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaimTemplate"},
      {"metadata", {{"name", "one-gpu"}, {"namespace", ns_}}},
      {"spec",
       {{"spec",
         {{"devices",
           {{"requests",
             json::array({{{"name", "gpu"},
                           {"exactly", {{"deviceClassName", kGpuClass}, {"count", 1}}}}})}}}}}}}};
  auto made = client_->Create(claim_templates, ns_, tmpl);
  ASSERT_TRUE(made.ok()) << made.error().message;
  json job = QueuedJob("claims", 6, 6);
  json& pod = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"];
  pod["resourceClaims"] =
      json::array({{{"name", "gpu"}, {"resourceClaimTemplateName", "one-gpu"}}});
  pod["containers"][0]["resources"]["claims"] = json::array({{{"name", "gpu"}}});
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  std::string said;
  EXPECT_TRUE(Eventually(
      [&] {
        said = ConditionOf(Get("claims"), "Admitted", "message");
        return said.find(kGpuResource) != std::string::npos;
      },
      seconds(60)))
      << "the job does not wait for " << kGpuResource << ": '" << said << "'\n"
      << Workload("claims").dump(2);
  EXPECT_TRUE(Pods("claims").empty());
  // Two devices of quota: admitted.
  auto raised = client_->Patch(
      kClusterQueues, "", cluster_queue_, PatchType::kJson,
      json::array({{{"op", "replace"},
                    {"path", "/spec/resourceGroups/0/flavors/0/resources/2/nominalQuota"},
                    {"value", "2"}}}));
  ASSERT_TRUE(raised.ok()) << raised.error().message;
  EXPECT_TRUE(Eventually(
      [&] { return ConditionOf(Workload("claims"), "QuotaReserved", "status") == "True"; },
      seconds(60)))
      << Workload("claims").dump(2);
}

TEST_F(Kueue, APreemptedJobStopsLosslesslyWaitsUncountedAndResumesFromTheExactStep) {
  // 500m: one job's gang (3 pods of 100m) fits, two do not; a higher priority preempts.
  MakeQueues("500m", /*hold=*/false, /*preempt=*/true);
  const std::string low_class = MakePriorityClass("low", 100);
  const std::string high_class = MakePriorityClass("high", 1000);
  // The low job trains for 18 s at least (12 backups held 1.5 s each): the preemption lands
  // mid-run. Any restart counted against its backoffLimit of 0 would fail it.
  json low = QueuedJob("low", 60, 5);
  low["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = low_class;
  low["spec"]["runPolicy"]["backoffLimit"] = 0;
  testing::SetEnv(low, "Worker", "TJ_FAILPOINTS", testing::PaceFailpoint(1500));
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, low).ok());
  ASSERT_TRUE(FirstBackup("low-worker-0", seconds(180)).is_object());
  // Its last backup is published, on the job and on its Workload, for whoever picks a victim.
  ASSERT_TRUE(Eventually(
      [&] {
        const json wl = Workload("low");
        if (!wl.is_object()) return false;
        const json a = wl["metadata"].value("annotations", json::object());
        return a.is_object() && a.contains("tjo.dev/last-backup-time") &&
               a.contains("tjo.dev/last-backup-step");
      },
      seconds(60)))
      << Workload("low").dump(2);
  EXPECT_TRUE(Get("low")["status"]["progress"]["lastBackup"].contains("time"))
      << Get("low")["status"].dump(2);

  json high = QueuedJob("high", 6, 6);
  high["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = high_class;
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, high).ok());

  // The low job's trainers stop after one agreed step, which the chief backs up (read while
  // its pod terminates: a real node's log goes with the pod).
  json stopped;
  ASSERT_TRUE(Eventually(
      [&] {
        auto s = PodEvents("low-worker-0", "stopped");
        if (s.empty()) return false;
        stopped = s.front();
        return true;
      },
      seconds(120)))
      << Kubectl(cluster_, "-n " + ns_ + " get tj,pods,workloads.kueue.x-k8s.io -o wide") << "\n"
      << PodLog("low-worker-0");
  // It waits without a pod while the high job runs, and says why.
  json waiting;
  ASSERT_TRUE(Eventually(
      [&] {
        waiting = Get("low");
        return Pods("low").empty();
      },
      seconds(120)))
      << Kubectl(cluster_, "-n " + ns_ + " get pods");
  EXPECT_EQ(waiting["status"].value("state", ""), "Queued") << waiting.dump(2);
  EXPECT_EQ(ConditionOf(waiting, "Admitted", "status"), "False") << waiting.dump(2);
  const auto w = StatusOf(waiting);
  EXPECT_EQ(w.restart_count, 1) << waiting.dump(2);
  EXPECT_EQ(w.restarts.by_cause, (std::map<std::string, int32_t>{{"Preempted", 1}}))
      << waiting.dump(2);
  EXPECT_EQ(w.restarts.backoff_limit_used, 0);
  // The status says where the job resumes: the backup its chief ended with (its termination
  // message), not the last poll's, on the job and on its Workload.
  ASSERT_TRUE(Eventually(
      [&] {
        waiting = Get("low");
        const json b = waiting["status"]["progress"].value("lastBackup", json::object());
        return b.value("epoch", -1) == stopped.value("epoch", -2) &&
               b.value("step", -1) == stopped.value("step", -2);
      },
      seconds(30)))
      << "stopped at " << stopped << "; " << waiting["status"].dump(2);
  EXPECT_EQ(Workload("low")["metadata"]["annotations"].value("tjo.dev/last-backup-step", ""),
            std::to_string(stopped.value("step", -2)))
      << Workload("low").dump(2);
  bool said_preempted = false;
  for (const std::string& r : EventReasons("low"))
    said_preempted = said_preempted || r == "Preempted";
  EXPECT_TRUE(said_preempted) << "no Preempted Event on the low job";

  const json high_done = WaitFinished("high", seconds(600));
  EXPECT_TRUE(StatusOf(high_done).IsTrue(api::condition::kSucceeded)) << high_done.dump(2);

  // Readmitted: gang 1 resumes from the very step gang 0 stopped at, and the job succeeds.
  const json resumed = WaitResumed("low-worker-0", 1, seconds(300));
  ASSERT_TRUE(resumed.is_object());
  EXPECT_EQ(resumed.value("epoch", -1), stopped.value("epoch", -2)) << resumed << stopped;
  EXPECT_EQ(resumed.value("step", -1), stopped.value("step", -2)) << resumed << stopped;
  const json done = WaitFinished("low", seconds(600));
  EXPECT_TRUE(StatusOf(done).IsTrue(api::condition::kSucceeded)) << done.dump(2);
  const auto s = StatusOf(done);
  EXPECT_EQ(s.restart_count, 1) << done.dump(2);
  EXPECT_EQ(s.restarts.by_cause, (std::map<std::string, int32_t>{{"Preempted", 1}}));
  EXPECT_EQ(s.restarts.backoff_limit_used, 0);
  EXPECT_TRUE(Eventually(
      [&] { return ConditionOf(Workload("low"), "Finished", "status") == "True"; }, seconds(30)));
  std::cout << "preempted at epoch " << stopped.value("epoch", 0) << " step "
            << stopped.value("step", 0) << ", resumed at epoch " << resumed.value("epoch", 0)
            << " step " << resumed.value("step", 0) << "; status.restarts "
            << done["status"]["restarts"].dump() << "\n";
}

// Kueue preempts, among jobs of one priority, the one admitted last: here the one that has
// backed up nothing yet. With the operator's priority boost (one per 3 s of work since the
// last backup, Kueue's PriorityBoost gate on) it preempts the job that loses least instead.
TEST_F(Kueue, AmongJobsOfOnePriorityThePreemptedOneIsTheOneWithTheLeastWorkUnsaved) {
  op_.reset();
  op_ = std::make_unique<testing::OperatorProcess>(
      cluster_, ns_, log_path_, /*keep_previous_log=*/true,
      std::vector<std::string>{"--kueue-priority-boost-max", "50", "--kueue-priority-boost-seconds",
                               "3"});
  // 600m: two gangs of 300m fit, a third does not.
  MakeQueues("600m", /*hold=*/false, /*preempt=*/true);
  const std::string low_class = MakePriorityClass("low", 100);
  const std::string high_class = MakePriorityClass("high", 1000);
  // Both train for minutes (a step held 200 ms): "saves" backs up every step and is admitted
  // first; "hoards" backs up once an epoch (hundreds of steps) and is admitted second.
  auto low_job = [&](const std::string& name, int save_freq) {
    json job = QueuedJob(name, 2000, save_freq);
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = low_class;
    testing::SetEnv(job, "Worker", "TJ_FAILPOINTS", "train.step=sleep:200");
    return job;
  };
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, low_job("saves", 1)).ok());
  ASSERT_TRUE(FirstBackup("saves-worker-0", seconds(180)).is_object());
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, low_job("hoards", 2000)).ok());
  auto boost = [&](const std::string& job) {
    const json wl = Workload(job);
    if (!wl.is_object()) return -1;
    const json a = wl["metadata"].value("annotations", json::object());
    const std::string v = a.is_object() ? a.value("kueue.x-k8s.io/priority-boost", "0") : "0";
    return std::atoi(v.c_str());
  };
  // The boost grows on the job that has not backed up and stays 0 on the one that has.
  ASSERT_TRUE(Eventually([&] { return boost("hoards") >= 3; }, seconds(240)))
      << Workload("hoards").dump(2) << "\n"
      << Kubectl(cluster_, "-n " + ns_ + " get tj,pods,workloads.kueue.x-k8s.io -o wide");
  ASSERT_EQ(boost("saves"), 0) << Workload("saves").dump(2);
  std::cout << "boost when the preemptor comes: hoards " << boost("hoards") << ", saves 0\n";

  json high = QueuedJob("high", 6, 6);
  high["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = high_class;
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, high).ok());
  ASSERT_TRUE(Eventually(
      [&] {
        const auto s = StatusOf(Get("saves"));
        auto it = s.restarts.by_cause.find("Preempted");
        return it != s.restarts.by_cause.end() && it->second == 1;
      },
      seconds(180)))
      << Get("saves")["status"].dump(2) << "\n"
      << Workload("saves").dump(2);
  // The high job runs in the quota "saves" gave back; "hoards" was never stopped.
  const json high_done = WaitFinished("high", seconds(600));
  EXPECT_TRUE(StatusOf(high_done).IsTrue(api::condition::kSucceeded)) << high_done.dump(2);
  const json hoards = Get("hoards");
  EXPECT_EQ(StatusOf(hoards).restart_count, 0) << hoards["status"].dump(2);
  EXPECT_NE(ConditionOf(Workload("hoards"), "Evicted", "status"), "True")
      << Workload("hoards").dump(2);
  EXPECT_EQ(ConditionOf(Workload("hoards"), "Admitted", "status"), "True")
      << Workload("hoards").dump(2);
}

}  // namespace
}  // namespace tj::kube
