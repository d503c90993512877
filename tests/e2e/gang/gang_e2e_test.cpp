// Native gang scheduling (docs/gangs.md) on the local cluster started with the GenericWorkload
// feature gate (TJ_FEATURE_GATES, set for this test by its CMakeLists.txt; process node):
//   - a pod of another tenant holds enough of the node's CPU that one worker of a 2-worker job
//     fits and two do not;
//   - the same job without a gang (schedulingPolicy.gang None) gets one of its workers bound:
//     the node is full enough for the gang to matter, so the test can fail;
//   - with the gang (the default, Auto) the operator makes PodGroup <job>-gang-0 (minCount 2,
//     owned by the job) and its pods name it; kube-scheduler binds neither worker and says why
//     in the PodGroup's condition PodGroupInitiallyScheduled=False, reason Unschedulable;
//   - once the other tenant's pod is deleted, both workers bind together and the job succeeds;
//   - a gang restart (a worker deleted) gets a new PodGroup <job>-gang-1, which the new pods
//     name, and the first group is deleted.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kube/object_meta.h"
#include "tests/e2e/support/e2e_support.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::Eventually;
using testing::Kubectl;
using testing::ScaledExample;
using testing::StatusOf;

const Resource kPodGroups{"scheduling.k8s.io/v1beta1", "podgroups"};

class NativeGang : public testing::JobTest {
 protected:
  // The node's allocatable CPU in millicores; 0 when it cannot be read.
  int64_t AllocatableMilliCpu() {
    auto node = client_->Get(resources::kNodes, "", "local-node");
    if (!node.ok()) return 0;
    const std::string cpu = (*node)["status"]["allocatable"].value("cpu", "0");
    if (!cpu.empty() && cpu.back() == 'm') return std::stoll(cpu.substr(0, cpu.size() - 1));
    return std::stoll(cpu) * 1000;
  }

  // A 2-worker job (no evaluator) of 1 epoch, each worker requesting `milli` CPU.
  static json TwoWorkers(const std::string& name, int64_t milli, const std::string& gang) {
    json job = ScaledExample(1, 6, 6);
    job["metadata"]["name"] = name;
    job["spec"]["replicaSpecs"].erase("Evaluator");
    json& c = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
    c["resources"]["requests"]["cpu"] = std::to_string(milli) + "m";
    if (c["resources"].contains("limits")) c["resources"]["limits"].erase("cpu");
    if (!gang.empty()) job["spec"]["runPolicy"]["schedulingPolicy"] = {{"gang", gang}};
    return job;
  }

  // How many pods of `job` are bound to the node (spec.nodeName set).
  int Bound(const std::string& job) {
    int n = 0;
    for (const json& p : Pods(job)) n += p["spec"].value("nodeName", "").empty() ? 0 : 1;
    return n;
  }

  json PodGroup(const std::string& name) {
    auto g = client_->Get(kPodGroups, ns_, name);
    return g.ok() ? *g : json();
  }

  // Condition `type` of `object`; an empty object when there is none (or no object).
  static json ConditionOf(const json& object, const std::string& type) {
    if (object.is_object()) {
      for (const json& c :
           object.value("status", json::object()).value("conditions", json::array())) {
        if (c.value("type", "") == type) return c;
      }
    }
    return json::object();
  }

  // The PodGroup a pod names in spec.schedulingGroup; "" when none.
  static std::string GroupOf(const json& pod) {
    const json& spec = pod.value("spec", json::object());
    return spec.value("schedulingGroup", json::object()).value("podGroupName", "");
  }

  std::string Describe() {
    return Kubectl(cluster_, "-n " + ns_ + " get tj,pods,podgroups.scheduling.k8s.io -o wide");
  }
};

TEST_F(NativeGang, AGangThatCannotFitWholeBindsNoPodUntilCapacityAppears) {
  const int64_t cpu = AllocatableMilliCpu();
  ASSERT_GT(cpu, 0) << "cannot read the node's allocatable CPU";
  // The other tenant holds 40%: one worker of 35% fits beside it, two (70%) do not.
  const int64_t worker = cpu * 35 / 100, blocker = cpu * 40 / 100;
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", "other-tenant"}}},
      {"spec",
       {{"containers",
         json::array({{{"name", "sleep"},
                       {"image", "busybox"},
                       {"command", json::array({"sleep", "600"})},
                       {"resources", {{"requests", {{"cpu", std::to_string(blocker) + "m"}}}}}}})},
        {"terminationGracePeriodSeconds", 0}}}};
  ASSERT_TRUE(client_->Create(resources::kPods, ns_, pod).ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client_->Get(resources::kPods, ns_, "other-tenant");
        return p.ok() && !(*p)["spec"].value("nodeName", "").empty();
      },
      seconds(60)))
      << Describe();

  // Without the gang, the scheduler binds what fits: one worker, which then waits for its peer.
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, TwoWorkers("loose", worker, "None")).ok());
  ASSERT_TRUE(
      Eventually([&] { return Pods("loose").size() == 2 && Bound("loose") == 1; }, seconds(60)))
      << "without the gang one worker should bind: " << Describe();
  for (const json& p : Pods("loose")) EXPECT_FALSE(p["spec"].contains("schedulingGroup"));
  EXPECT_FALSE(PodGroup("loose-gang-0").is_object()) << "an opted-out job got a PodGroup";
  Kubectl(cluster_, "-n " + ns_ + " delete tj loose --wait=false");
  ASSERT_TRUE(Eventually([&] { return Pods("loose").empty(); }, seconds(60))) << Describe();

  // With it: the PodGroup, and no worker bound while the gang does not fit whole.
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, TwoWorkers("gang", worker, "")).ok());
  ASSERT_TRUE(Eventually(
      [&] {
        return ConditionOf(PodGroup("gang-gang-0"), "PodGroupInitiallyScheduled")
                   .value("status", "") == "False";
      },
      seconds(60)))
      << "the scheduler did not say why the gang waits: " << PodGroup("gang-gang-0").dump(2)
      << Describe();
  const json group = PodGroup("gang-gang-0");
  EXPECT_EQ(group["spec"]["schedulingPolicy"]["gang"]["minCount"], 2) << group.dump(2);
  EXPECT_EQ(group["metadata"]["ownerReferences"][0].value("name", ""), "gang") << group.dump(2);
  const json why = ConditionOf(group, "PodGroupInitiallyScheduled");
  EXPECT_EQ(why.value("reason", ""), "Unschedulable") << why.dump();
  EXPECT_FALSE(why.value("message", "").empty()) << why.dump();
  ASSERT_EQ(Pods("gang").size(), 2U) << Describe();
  for (const json& p : Pods("gang")) {
    EXPECT_EQ(GroupOf(p), "gang-gang-0") << p.dump();
  }
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    ASSERT_EQ(Bound("gang"), 0) << "a worker of a gang that does not fit was bound: " << Describe();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::cerr << "the PodGroup says: " << why.value("message", "") << "\n";

  // Capacity appears: the whole gang binds and trains to the end.
  Kubectl(cluster_, "-n " + ns_ + " delete pod other-tenant --wait=false");
  ASSERT_TRUE(Eventually([&] { return Bound("gang") == 2; }, seconds(120))) << Describe();
  const json done = WaitFinished("gang", seconds(300));
  EXPECT_TRUE(StatusOf(done).IsTrue(api::condition::kSucceeded)) << done.dump(2);
  EXPECT_EQ(ConditionOf(PodGroup("gang-gang-0"), "PodGroupInitiallyScheduled").value("status", ""),
            "True")
      << PodGroup("gang-gang-0").dump(2);
}

TEST_F(NativeGang, AGangRestartGetsANewPodGroupAndTheOldOneGoes) {
  json job = TwoWorkers("restarted", 100, "");
  // Long enough to be running when a worker is deleted; the job is deleted, not waited for.
  json& args = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"];
  testing::SetArg(args, "--steps-per-epoch", "2000");
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());
  ASSERT_TRUE(Eventually([&] { return Bound("restarted") == 2; }, seconds(60))) << Describe();
  ASSERT_TRUE(PodGroup("restarted-gang-0").is_object()) << Describe();

  Kubectl(cluster_, "-n " + ns_ + " delete pod restarted-worker-1 --wait=false");
  auto new_gang = [&] {
    const std::vector<json> pods = Pods("restarted");
    if (pods.size() != 2) return false;
    for (const json& p : pods) {
      if (kube::LabelOf(p, api::kLabelRestartCount) != "1" || GroupOf(p) != "restarted-gang-1" ||
          p["spec"].value("nodeName", "").empty()) {
        return false;
      }
    }
    return true;
  };
  ASSERT_TRUE(Eventually(new_gang, seconds(90))) << Describe();
  EXPECT_EQ(PodGroup("restarted-gang-1")["spec"]["schedulingPolicy"]["gang"]["minCount"], 2);
  EXPECT_TRUE(Eventually([&] { return !PodGroup("restarted-gang-0").is_object(); }, seconds(60)))
      << "the first gang's PodGroup was not deleted: " << Describe();
}

}  // namespace
}  // namespace tj::kube
