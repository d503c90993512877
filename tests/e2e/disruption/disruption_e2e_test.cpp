// What a cluster admin does to running training: evict one of its pods through the Eviction
// API (policy/v1, as kubectl drain does), then drain the node. Each
// pod gets SIGTERM; the trainers stop together after one agreed step, the chief backs it up,
// every replica exits 75; the operator restarts the gang without charging backoffLimit. On a
// one-node cluster the drained job's new pods wait Pending until the node is uncordoned.
// The job must end Succeeded, with the final weights of the same job never disrupted, and
// status.restarts must show both restarts, attributed to the evictions (the API server's
// DisruptionTarget condition, reason EvictionByEvictionAPI), and a backoffLimit left whole.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>

#include "tests/e2e/support/e2e_support.h"
#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::Eventually;
using testing::FaultJob;
using testing::Kubectl;
using testing::PaceFailpoint;
using testing::StatusOf;

constexpr char kJob[] = "fmnist";
constexpr char kChief[] = "fmnist-worker-0";  // no Chief replica: worker 0 is the chief
constexpr char kWorker1[] = "fmnist-worker-1";
const seconds kStartTimeout(180);
const seconds kFinishTimeout(600);
// Each backup write held this long, so that training lasts long enough (12 backups) for
// both disruptions to land mid-run; the pace changes no result.
const std::string kPace = PaceFailpoint(1500);

class Disruption : public testing::JobTest {
 protected:
  void TearDown() override {
    // Never leave the machine's one node cordoned, whatever happened.
    if (!node_.empty()) Kubectl(cluster_, "uncordon " + node_);
    JobTest::TearDown();
  }

  // Evicts a pod through the Eviction API, as kubectl drain does; the API server's answer.
  std::string Evict(const std::string& pod) {
    const std::string body = log_path_ + "-eviction-" + pod + ".json";
    ::tj::testing::WriteBytes(body, json{{"apiVersion", "policy/v1"},
                                         {"kind", "Eviction"},
                                         {"metadata", {{"name", pod}, {"namespace", ns_}}}}
                                        .dump());
    return Kubectl(cluster_, "create --raw /api/v1/namespaces/" + ns_ + "/pods/" + pod +
                                 "/eviction -f " + body);
  }

  std::string Node() {
    return testing::Sh("kubectl --kubeconfig " + cluster_->kubeconfig() +
                       " get nodes -o jsonpath='{.items[0].metadata.name}' 2>/dev/null");
  }

  std::string node_;  // cordoned by this test
};

TEST_F(Disruption, EvictedWorkerThenDrainedNodeEndsWithReferenceWeightsAndFullBudget) {
  json job = FaultJob(kPace);
  // A budget of one: were either disruption counted, the second would fail the job.
  job["spec"]["runPolicy"]["backoffLimit"] = 1;
  const std::string reference = ReferenceSha(FaultJob(kPace), kFinishTimeout);
  ASSERT_EQ(reference.size(), 64u);
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, job).ok());

  // 1. One worker evicted mid-epoch: the gang stops after one step it agrees on.
  ASSERT_TRUE(FirstBackup(kChief, kStartTimeout).is_object());
  const std::string evicted = Evict(kWorker1);
  ASSERT_EQ(evicted.find("rror"), std::string::npos) << evicted;
  ASSERT_TRUE(Eventually([&] { return !PodEvents(kChief, "stopped").empty(); }, seconds(60)))
      << PodLog(kChief);
  const json stopped = PodEvents(kChief, "stopped").front();
  const json resumed = WaitResumed(kChief, 1, kFinishTimeout);
  ASSERT_TRUE(resumed.is_object());
  // The new gang starts from the very step the old one stopped after.
  EXPECT_EQ(resumed.value("epoch", -1), stopped.value("epoch", -2)) << resumed << stopped;
  EXPECT_EQ(resumed.value("step", -1), stopped.value("step", -2)) << resumed << stopped;

  // 2. The node drained while gang 1 trains: every pod is evicted; the operator's new pods
  // stay Pending on the cordoned node until it is uncordoned.
  node_ = Node();
  ASSERT_FALSE(node_.empty());
  // A trainer's pod may take its whole grace period (30 s) and the kubelet's teardown on a
  // busy machine: give kubectl its own 180 s before the test gives up on it.
  const std::string drain = ::tj::kube::testing::Sh(
      "kubectl --kubeconfig " + cluster_->kubeconfig() + " drain " + node_ +
          " --ignore-daemonsets --delete-emptydir-data --force --timeout=180s",
      seconds(200));
  EXPECT_NE(drain.find("drained"), std::string::npos) << drain << "\n--- chief\n" << PodLog(kChief);
  ASSERT_TRUE(Eventually([&] { return StatusOf(Get(kJob)).restart_count == 2; }, seconds(120)))
      << Get(kJob).dump(2);
  ASSERT_TRUE(Eventually(
      [&] {
        auto pods = Pods(kJob);
        if (pods.empty()) return false;
        for (const auto& p : pods) {
          if (p["status"].value("phase", "") != "Pending") return false;
        }
        return true;
      },
      seconds(120)))
      << Kubectl(cluster_, "-n " + ns_ + " get pods -o wide");
  const std::string uncordon = Kubectl(cluster_, "uncordon " + node_);
  EXPECT_NE(uncordon.find("uncordoned"), std::string::npos) << uncordon;
  node_.clear();

  ExpectSucceededWithReferenceWeights(kJob, kChief, reference, 2, kFinishTimeout);
  const json done = Get(kJob);
  const auto s = StatusOf(done);
  EXPECT_EQ(s.restarts.backoff_limit_used, 0) << done.dump(2);
  EXPECT_EQ(s.restarts.evaluator_backoff_limit_used, 0) << done.dump(2);
  EXPECT_EQ(s.restarts.by_cause.count("Failed"), 0u) << done.dump(2);
  int by_cause = 0;
  for (const auto& [cause, n] : s.restarts.by_cause) by_cause += n;
  EXPECT_EQ(by_cause, 2) << done.dump(2);
  // Both the eviction and the drain (which evicts) are Evictions, not plain deletions.
  EXPECT_EQ(s.restarts.by_cause.count("Deleted"), 0u) << done.dump(2);
  EXPECT_GE(s.restarts.by_cause.count("Evicted"), 1u) << done.dump(2);
  ASSERT_TRUE(done["status"].contains("restarts")) << done.dump(2);
  EXPECT_EQ(done["status"]["restarts"].value("total", -1), 2) << done.dump(2);
  const std::string events = Kubectl(cluster_, "-n " + ns_ + " get events");
  // For the record (docs/reliability.md): where the gang stopped, and what status says.
  std::cout << "stopped after epoch " << stopped.value("epoch", 0) << " step "
            << stopped.value("step", 0) << "; status.restarts " << done["status"]["restarts"].dump()
            << "\n"
            << Kubectl(cluster_, "-n " + ns_ +
                                     " get events --field-selector reason=GangRestart "
                                     "-o custom-columns=MESSAGE:.message");
  EXPECT_NE(events.find("not counted against backoffLimit"), std::string::npos) << events;
}

}  // namespace
}  // namespace tj::kube
