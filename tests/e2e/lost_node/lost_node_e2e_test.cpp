// A lost node on the local cluster (label `fault`). The process node stops as a machine that
// hangs or drops off the network does: its agent is SIGKILLed and not started again, and the
// trainers of the job's pods are frozen (SIGSTOP). The node controller marks the node NotReady
// after this cluster's node monitor grace period (TJ_NODE_MONITOR_GRACE_PERIOD, shortened to
// 15 s for this binary's cluster; Kubernetes' default is 50 s). Then, without waiting for the
// pods' not-ready and unreachable tolerations (300 s), the operator restarts the gang with the
// cause NodeLost, not counted against backoffLimit, and force-deletes the old pods, whose
// deletion no kubelet confirms, 30 s after their grace period; the new gang's pods, of the same
// names, are made and wait for a node. The agent starts again, kills the frozen processes of
// pods that are gone, runs the new gang, and the job Succeeds from its last backup with the
// final weights of an uninterrupted run.
//
// One node: a second process node in one cluster would need the agents to share their pods'
// names (/etc/hosts) and their volumes' directories, which each agent keeps to itself.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/support/e2e_support.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using std::chrono::steady_clock;
using testing::Eventually;
using testing::Kubectl;
using testing::TrainerPids;

constexpr char kJob[] = "fmnist";
constexpr char kChief[] = "fmnist-worker-0";  // no Chief replica: worker 0 is the chief
constexpr char kNode[] = "local-node";
// Each backup write held this long: training is still far from over after the first backup.
constexpr int kPaceMs = 700;
const seconds kStartTimeout(240);   // from creation to the first backup
const seconds kFinishTimeout(480);  // from the node's return to the end

class LostNode : public testing::JobTest {
 protected:
  void SetUp() override {
    // Read when the first SetUp starts the binary's cluster.
    ::setenv("TJ_NODE_MONITOR_GRACE_PERIOD", "15s", 1);
    JobTest::SetUp();
  }
  void TearDown() override {
    // A test that failed with the node stopped: its processes thawed and its agent back, so
    // that the cluster's `down` stops them with it.
    for (pid_t pid : frozen_) ::kill(pid, SIGCONT);
    if (stopped_) {
      auto started = cluster_->Script("start-node");
      if (!started.ok()) ADD_FAILURE() << started.status().message();
      // The agent kills the processes of pods that are gone at its first heartbeat after its
      // first pod list (5 s); stopped before that, it would leave them running.
      std::this_thread::sleep_for(seconds(12));
    }
    JobTest::TearDown();
  }

  // The status of the node's Ready condition ("" when it cannot be read).
  std::string NodeReady() {
    auto node = client_->Get(resources::kNodes, "", kNode);
    if (!node.ok()) return "";
    for (const json& c : (*node)["status"].value("conditions", json::array())) {
      if (c.value("type", "") == "Ready") return c.value("status", "");
    }
    return "";
  }
  // The job's worker pods of gang `gang` (tjo.dev/restart-count).
  int WorkersOfGang(int gang) {
    int n = 0;
    for (const json& p : Pods(kJob)) {
      const json& labels = p["metadata"]["labels"];
      n += labels.value(api::kLabelRestartCount, "") == std::to_string(gang) &&
           p["metadata"].value("name", "").rfind(std::string(kJob) + "-worker-", 0) == 0;
    }
    return n;
  }

  bool stopped_ = false;       // the node agent is down
  std::vector<pid_t> frozen_;  // the trainers SIGSTOPped with it
};

TEST_F(LostNode, AGangOnANodeThatStopsRestartsAtOnceAndItsStuckPodsDoNotBlockIt) {
  const std::string reference = ReferenceSha(testing::FaultJob(""), kFinishTimeout);
  ASSERT_EQ(reference.size(), 64u);
  ASSERT_TRUE(
      client_->Create(api::kTrainingJobs, ns_, testing::FaultJob(testing::PaceFailpoint(kPaceMs)))
          .ok());
  ASSERT_FALSE(FirstBackup(kChief, kStartTimeout).is_null());

  // The node stops: its agent dies, its pods' processes hang.
  auto stopped = cluster_->Script("stop-node");
  ASSERT_TRUE(stopped.ok()) << stopped.status().message();
  stopped_ = true;
  const auto stop = steady_clock::now();
  frozen_ = TrainerPids(ns_);
  ASSERT_GE(frozen_.size(), 2u) << "the workers (and the evaluator)";
  for (pid_t pid : frozen_) ASSERT_EQ(::kill(pid, SIGSTOP), 0) << pid;

  ASSERT_TRUE(Eventually([&] { return NodeReady() == "Unknown"; }, seconds(120)))
      << Kubectl(cluster_, "get node " + std::string(kNode) + " -o yaml");
  const auto not_ready = steady_clock::now();
  std::cerr << "node NotReady " << std::chrono::duration<double>(not_ready - stop).count()
            << " s after it stopped\n";

  // The gang restarts at once, charged to NodeLost: not after the 300 s of the pods' default
  // tolerations.
  json job;
  ASSERT_TRUE(Eventually(
      [&] {
        job = Get(kJob);
        return testing::StatusOf(job).restarts.by_cause.contains("NodeLost");
      },
      seconds(60)))
      << job.dump(2) << op_->Log().substr(0, 20000);
  const auto restarted = steady_clock::now();
  std::cerr << "gang restarted " << std::chrono::duration<double>(restarted - not_ready).count()
            << " s after the node went NotReady\n";
  EXPECT_LT(restarted - not_ready, seconds(30));
  const api::TrainingJobStatus st = testing::StatusOf(job);
  EXPECT_EQ(st.restart_count, 1);
  EXPECT_EQ(st.restarts.backoff_limit_used, 0);
  ASSERT_NE(st.Find("Restarting"), nullptr) << job.dump(2);
  EXPECT_NE(st.Find("Restarting")->message.find("is on node local-node, which is not ready"),
            std::string::npos)
      << st.Find("Restarting")->message;
  // Events are written in the background, after the passes.
  EXPECT_TRUE(Eventually([&] { return !EventMessages("NodeLost").empty(); }, seconds(30)));

  // The old pods, whose deletion no kubelet will confirm, are force-deleted once their grace
  // (10 s, the example's) and 30 s more have passed; the new gang's take their names and wait
  // for a node.
  ASSERT_TRUE(Eventually([&] { return WorkersOfGang(0) == 0; }, seconds(120)))
      << Kubectl(cluster_, "-n " + ns_ + " get pods -o wide");
  std::cerr << "old pods gone "
            << std::chrono::duration<double>(steady_clock::now() - restarted).count()
            << " s after the restart\n";
  EXPECT_TRUE(Eventually([&] { return EventMessages("ForceDeleted").size() >= 2; }, seconds(30)));
  for (const std::string& m : EventMessages("ForceDeleted")) {
    EXPECT_NE(m.find("on node local-node, which is not ready"), std::string::npos) << m;
  }
  ASSERT_TRUE(Eventually([&] { return WorkersOfGang(1) == 2; }, seconds(60)))
      << Kubectl(cluster_, "-n " + ns_ + " get pods -o wide");
  EXPECT_NE(NodeReady(), "True") << "the node is still down";

  // The node comes back: the frozen processes go with their pods, the new gang runs.
  auto started = cluster_->Script("start-node");
  ASSERT_TRUE(started.ok()) << started.status().message();
  stopped_ = false;
  ExpectSucceededWithReferenceWeights(kJob, kChief, reference, 1, kFinishTimeout,
                                      /*expect_no_trainer_left=*/true);
  for (pid_t pid : frozen_) {
    EXPECT_NE(::kill(pid, 0), 0) << "the old gang's tj-trainer " << pid << " still runs";
  }
  frozen_.clear();
  EXPECT_FALSE(PodEvents(kChief, "restored").empty()) << PodLog(kChief);
  EXPECT_EQ(testing::StatusOf(Get(kJob)).restarts.backoff_limit_used, 0);
}

}  // namespace
}  // namespace tj::kube
