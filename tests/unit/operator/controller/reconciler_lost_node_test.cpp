// Lost nodes (operator/controller/reconciler_lost_node.cpp): a chief or worker pod on a node
// that is not Ready, or that carries a NoExecute taint the pod does not tolerate (or no longer
// does, past its tolerationSeconds), restarts the gang at once with the cause NodeLost; the
// evaluator there is made again; a pod stuck terminating on a node that is not Ready is
// force-deleted once its grace has passed, never before and never on a Ready node; and an
// operator that does not watch nodes judges none.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "operator/controller/cache_transforms.h"
#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

constexpr auto npos = std::string::npos;

// The tolerations the API server gives every pod (DefaultTolerationSeconds).
json DefaultTolerations() {
  return json::array({{{"key", "node.kubernetes.io/not-ready"},
                       {"operator", "Exists"},
                       {"effect", "NoExecute"},
                       {"tolerationSeconds", 300}},
                      {{"key", "node.kubernetes.io/unreachable"},
                       {"operator", "Exists"},
                       {"effect", "NoExecute"},
                       {"tolerationSeconds", 300}}});
}

// A Node as the operator's cache keeps it: Ready `ready` since `since`, with `taints`.
json Node(const std::string& name, const std::string& ready, kube::WallTime since,
          json taints = json::array()) {
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", name}, {"uid", "uid-" + name}}},
               {"spec", {{"taints", std::move(taints)}}},
               {"status",
                {{"conditions",
                  json::array({{{"type", "Ready"},
                                {"status", ready},
                                {"reason", ready == "True" ? "KubeletReady" : "NodeStatusUnknown"},
                                {"lastHeartbeatTime", kube::FormatTime(since)},
                                {"lastTransitionTime", kube::FormatTime(since)}}})}}}};
  TrimNodeForCache(node);
  return node;
}

json NoExecuteTaint(const std::string& key, kube::WallTime added) {
  return {{"key", key}, {"effect", "NoExecute"}, {"timeAdded", kube::FormatTime(added)}};
}

// World's running gang on two Ready nodes: worker 0 and the evaluator on node-a, worker 1 on
// node-b; each pod with a uid and the default tolerations, as the API server stores it.
struct NodeWorld : World {
  NodeWorld() {
    Running();
    Bind("mnist-worker-0", "node-a");
    Bind("mnist-worker-1", "node-b");
    Bind("mnist-evaluator-0", "node-a");
    in.nodes = std::map<std::string, json>{{"node-a", Node("node-a", "True", kT0 - seconds(600))},
                                           {"node-b", Node("node-b", "True", kT0 - seconds(600))}};
  }
  json& PodNamed(const std::string& name) {
    for (json& p : in.pods) {
      if (p["metadata"]["name"] == name) return p;
    }
    ADD_FAILURE() << "no pod " << name;
    static json none;
    return none;
  }
  void Bind(const std::string& pod, const std::string& node) {
    json& p = PodNamed(pod);
    p["metadata"]["uid"] = "uid-" + pod;
    p["spec"]["nodeName"] = node;
    p["spec"]["tolerations"] = DefaultTolerations();
  }
  void SetNode(const std::string& name, const std::string& ready, kube::WallTime since,
               json taints = json::array()) {
    (*in.nodes)[name] = Node(name, ready, since, std::move(taints));
  }
  // The pod as the API server shows it once its deletion was asked for at `asked`, with a
  // grace period of `grace` seconds.
  void Deleting(const std::string& pod, kube::WallTime asked, int grace = 30) {
    json& p = PodNamed(pod);
    p["metadata"]["deletionTimestamp"] = kube::FormatTime(asked + seconds(grace));
    p["metadata"]["deletionGracePeriodSeconds"] = grace;
  }
};

// Passes that look at the lost-node rules alone: no progress poll in the way of a requeue.
ReconcilerOptions Quiet() {
  ReconcilerOptions o;
  o.progress_poll = std::chrono::hours(1);
  return o;
}

// `d` restarted the gang, once, for a lost node, its Restarting message saying `what`.
void ExpectRestartedForALostNode(const Decision& d, const std::string& what) {
  EXPECT_TRUE(d.job_restarted);
  EXPECT_EQ(StatusOf(d).restarts.by_cause, (std::map<std::string, int32_t>{{"NodeLost", 1}}));
  const std::string& message = Cond(d, "Restarting").message;
  EXPECT_NE(message.find(what), npos) << message;
}

const Action* ForceDeletion(const Decision& d, const std::string& pod) {
  for (const Action& a : d.actions) {
    if (a.kind == Action::Kind::kDelete && a.name == pod && a.grace_period_seconds) return &a;
  }
  return nullptr;
}

TEST(LostNode, APodOnANodeThatIsNotReadyRestartsTheGangAtOnce) {
  for (const std::string ready : {"Unknown", "False"}) {
    NodeWorld w;
    w.SetNode("node-b", ready, kT0 - seconds(60));
    // The gang had trained 100 s, its last backup 40 s ago, 10 steps before where it is.
    w.in.job["status"]["goodput"] = {{"trainingSince", kube::FormatTime(kT0 - seconds(100))}};
    w.in.job["status"]["progress"] = {{"epoch", 1},
                                      {"step", 20},
                                      {"globalStep", 40},
                                      {"lastBackup",
                                       {{"epoch", 1},
                                        {"step", 10},
                                        {"globalStep", 30},
                                        {"time", kube::FormatTime(kT0 - seconds(40))}}}};
    // Default options: a settle time of 30 s, which the lost pod, still Running in the API
    // server, does not make the gang wait for.
    const Decision d = Reconcile(w.in);
    const api::TrainingJobStatus st = StatusOf(d);
    EXPECT_TRUE(d.job_restarted) << ready;
    EXPECT_EQ(st.restart_count, 1);
    EXPECT_EQ(st.restarts.by_cause, (std::map<std::string, int32_t>{{"NodeLost", 1}}));
    EXPECT_EQ(st.restarts.backoff_limit_used, 0) << "the infrastructure's fault: not counted";
    EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-worker-0", "mnist-worker-1"}))
        << "the evaluator on a Ready node goes on";
    const Action* e = FindEvent(d, "NodeLost");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->event_type, "Warning");
    EXPECT_NE(
        e->message.find("pod mnist-worker-1 is on node node-b, which is not ready (Ready " + ready +
                        " since " + kube::FormatTime(kT0 - seconds(60)) + ": NodeStatusUnknown)"),
        npos)
        << e->message;
    const api::Condition& restarting = Cond(d, "Restarting");
    EXPECT_EQ(restarting.status, "True");
    EXPECT_EQ(restarting.reason, "GangRestart");
    EXPECT_EQ(restarting.message.rfind("restart 1 (NodeLost, not counted against backoffLimit 3): "
                                       "pod mnist-worker-1 is on node node-b",
                                       0),
              0u)
        << restarting.message;
    // Goodput: the work since the last backup, charged to NodeLost as to any cause.
    EXPECT_EQ(st.goodput.lost.at("NodeLost"), (api::GoodputLoss{1, 40, 10}));
    EXPECT_EQ(d.work_lost.at("NodeLost"), (api::GoodputLoss{1, 40, 10}));
    EXPECT_EQ(st.goodput.recovering_cause, "NodeLost");
    EXPECT_EQ(ForceDeletion(d, "mnist-worker-1"), nullptr) << "not being deleted yet";
  }
}

TEST(LostNode, FailurePolicyDecidesWhatANodeLossCosts) {
  NodeWorld w;
  w.in.job["spec"]["failurePolicy"] = {
      {"rules", json::array({{{"name", "no-lost-nodes"},
                              {"action", "FailJob"},
                              {"onCauses", json::array({"NodeLost"})}}})}};
  w.SetNode("node-a", "Unknown", kT0 - seconds(1));
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Cond(d, "Failed").reason, "FailurePolicy");
  EXPECT_NE(Cond(d, "Failed").message.find("pod mnist-worker-0 is on node node-a"), npos);

  NodeWorld counted;
  counted.in.job["spec"]["failurePolicy"] = {
      {"rules",
       json::array({{{"action", "RestartJob"}, {"onCauses", json::array({"NodeLost"})}}})}};
  counted.SetNode("node-b", "Unknown", kT0 - seconds(1));
  d = Reconcile(counted.in);
  EXPECT_EQ(StatusOf(d).restarts.backoff_limit_used, 1);
  EXPECT_NE(Cond(d, "Restarting").message.find("(NodeLost, 1 of backoffLimit 3)"), npos);
}

TEST(LostNode, ATaintToleratedForAWhileRestartsTheGangOnlyOnceItsTimeIsUp) {
  NodeWorld w;
  const kube::WallTime added = kT0 - seconds(10);
  w.SetNode("node-b", "True", kT0 - seconds(600),
            json::array({NoExecuteTaint("example.com/maintenance", added)}));
  for (const char* pod : {"mnist-worker-0", "mnist-worker-1"}) {
    w.PodNamed(pod)["spec"]["tolerations"].push_back({{"key", "example.com/maintenance"},
                                                      {"operator", "Exists"},
                                                      {"effect", "NoExecute"},
                                                      {"tolerationSeconds", 60}});
  }
  Decision d = Reconcile(w.in, Quiet());
  EXPECT_FALSE(d.job_restarted);
  EXPECT_EQ(FindEvent(d, "NodeLost"), nullptr);
  EXPECT_EQ(d.requeue_after, milliseconds(50001)) << "a pass when the toleration runs out";

  w.in.now = added + seconds(60);
  d = Reconcile(w.in, Quiet());
  ExpectRestartedForALostNode(d,
                              "node node-b, which has had the taint example.com/maintenance:"
                              "NoExecute since " +
                                  kube::FormatTime(added) + ", which the pod tolerates for 60s");
  EXPECT_NE(FindEvent(d, "NodeLost"), nullptr);
}

TEST(LostNode, AnUntoleratedNoExecuteTaintRestartsTheGangANoScheduleOneDoesNot) {
  NodeWorld w;
  w.SetNode("node-b", "True", kT0 - seconds(600),
            json::array({{{"key", "node.kubernetes.io/unschedulable"}, {"effect", "NoSchedule"}}}));
  w.PodNamed("mnist-worker-1")["spec"].erase("tolerations");
  Decision d = Reconcile(w.in, Quiet());
  EXPECT_FALSE(d.job_restarted) << "a cordoned node is not lost: its pods run on";

  w.SetNode("node-b", "True", kT0 - seconds(600),
            json::array({NoExecuteTaint("example.com/broken", kT0 - seconds(5))}));
  ExpectRestartedForALostNode(Reconcile(w.in, Quiet()),
                              "which has the taint example.com/broken:NoExecute, which the pod "
                              "does not tolerate");
}

// The old gang's pods were deleted by the restart; worker 1's node is lost, so its kubelet
// never confirms the deletion: force-deleted 30 s after the later of the grace period's end
// and the node's loss, not before; worker 0, on a Ready node, is left to its kubelet however
// long it takes.
TEST(LostNode, APodStuckTerminatingOnALostNodeIsForceDeletedAfterTheGraceNotBefore) {
  NodeWorld w;
  w.in.job["status"]["restartCount"] = 1;
  w.in.job["status"]["createdGeneration"] = -1;
  const kube::WallTime asked = kT0 - seconds(300);
  w.Deleting("mnist-worker-0", asked);
  w.Deleting("mnist-worker-1", asked);
  const kube::WallTime grace_ends = asked + seconds(30);
  const kube::WallTime lost = grace_ends + seconds(100);  // lost after the grace ended
  w.SetNode("node-b", "Unknown", lost);

  w.in.now = lost + seconds(29);
  Decision d = Reconcile(w.in, Quiet());
  EXPECT_EQ(ForceDeletion(d, "mnist-worker-1"), nullptr);
  EXPECT_EQ(FindEvent(d, "ForceDeleted"), nullptr);
  EXPECT_TRUE(Created(d).empty()) << "the old gang holds the names";
  EXPECT_LE(*d.requeue_after, milliseconds(1001));

  w.in.now = lost + seconds(30);
  d = Reconcile(w.in, Quiet());
  const Action* forced = ForceDeletion(d, "mnist-worker-1");
  ASSERT_NE(forced, nullptr);
  EXPECT_EQ(forced->resource.plural, "pods");
  EXPECT_EQ(forced->grace_period_seconds, 0);
  EXPECT_EQ(forced->precondition_uid, "uid-mnist-worker-1");
  const Action* e = FindEvent(d, "ForceDeleted");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->event_type, "Warning");
  EXPECT_NE(e->message.find("pod mnist-worker-1 was still terminating on node node-b, which is "
                            "not ready"),
            npos)
      << e->message;
  EXPECT_EQ(ForceDeletion(d, "mnist-worker-0"), nullptr) << "its node is Ready";
  const std::vector<std::string> deleted = Deleted(d);
  EXPECT_EQ(std::count(deleted.begin(), deleted.end(), "mnist-worker-0"), 0);
  EXPECT_FALSE(d.job_restarted) << "the restart was decided before";

  // Lost before the grace ended: 30 s after the grace.
  w.SetNode("node-b", "Unknown", asked);
  w.in.now = grace_ends + seconds(29);
  EXPECT_EQ(ForceDeletion(Reconcile(w.in, Quiet()), "mnist-worker-1"), nullptr);
  w.in.now = grace_ends + seconds(30);
  EXPECT_NE(ForceDeletion(Reconcile(w.in, Quiet()), "mnist-worker-1"), nullptr);
}

TEST(LostNode, NeverForceDeletesAPodWhoseNodeIsReady) {
  NodeWorld w;
  w.in.job["status"]["restartCount"] = 1;
  w.in.job["status"]["createdGeneration"] = -1;
  w.Deleting("mnist-worker-1", kT0 - seconds(3600));
  // Ready, with a NoExecute taint the pod does not tolerate: lost to the pod, but a kubelet
  // is there to end it.
  w.PodNamed("mnist-worker-1")["spec"].erase("tolerations");
  w.SetNode("node-b", "True", kT0 - seconds(7200),
            json::array({NoExecuteTaint("example.com/broken", kT0 - seconds(3600))}));
  Decision d = Reconcile(w.in, Quiet());
  EXPECT_EQ(ForceDeletion(d, "mnist-worker-1"), nullptr);
  EXPECT_EQ(FindEvent(d, "ForceDeleted"), nullptr);
}

TEST(LostNode, ForceDeletionIsOffWithZero) {
  NodeWorld w;
  w.Deleting("mnist-worker-1", kT0 - seconds(3600));
  w.SetNode("node-b", "Unknown", kT0 - seconds(3600));
  ReconcilerOptions o = Quiet();
  o.lost_node_force_delete = milliseconds(0);
  const Decision d = Reconcile(w.in, o);
  EXPECT_EQ(ForceDeletion(d, "mnist-worker-1"), nullptr);
  EXPECT_EQ(FindEvent(d, "ForceDeleted"), nullptr);
}

// A job being deleted (in the foreground, its pods first) still has its stuck pods forced,
// and the pass that forces one comes by itself when it is due.
TEST(LostNode, AJobBeingDeletedStillHasItsStuckPodsForceDeleted) {
  NodeWorld w;
  w.in.job["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0 - seconds(100));
  w.Deleting("mnist-worker-1", kT0 - seconds(40));  // its grace ended 10 s ago
  w.SetNode("node-b", "Unknown", kT0 - seconds(3600));
  Decision d = Reconcile(w.in, Quiet());
  EXPECT_EQ(ForceDeletion(d, "mnist-worker-1"), nullptr);
  EXPECT_EQ(d.requeue_after, milliseconds(20001));
  w.in.now = kT0 + seconds(20);
  d = Reconcile(w.in, Quiet());
  EXPECT_NE(ForceDeletion(d, "mnist-worker-1"), nullptr);
  EXPECT_FALSE(d.status);
}

TEST(LostNode, WithoutNodesObservedNothingIsJudged) {
  NodeWorld w;
  w.SetNode("node-b", "Unknown", kT0 - seconds(3600));
  w.Deleting("mnist-evaluator-0", kT0 - seconds(3600));
  w.SetNode("node-a", "Unknown", kT0 - seconds(3600));
  w.in.nodes.reset();  // the operator may not list nodes
  const Decision d = Reconcile(w.in, Quiet());
  EXPECT_FALSE(d.job_restarted);
  EXPECT_TRUE(Deleted(d).empty()) << ::testing::PrintToString(Deleted(d));
  EXPECT_EQ(FindEvent(d, "NodeLost"), nullptr);
  EXPECT_EQ(FindEvent(d, "ForceDeleted"), nullptr);

  // A node the operator does not know (deleted; the pod garbage collector's to handle).
  NodeWorld unknown;
  unknown.in.nodes->erase("node-b");
  EXPECT_FALSE(Reconcile(unknown.in, Quiet()).job_restarted);
}

// The first failure decides: a failure of the program before the node was lost is judged as
// any failure is (here exit 1, which ExitCode does not retry); a peer that exited 75 because it
// lost the pod on the lost node is the loss's consequence.
TEST(LostNode, AFailureBeforeTheLossDecidesAPeerLostOnlyFollowsIt) {
  const kube::WallTime lost = kT0 - seconds(60);
  for (const int code : {1, 75}) {
    NodeWorld w;
    w.SetNode("node-b", "Unknown", lost);
    json& worker0 = w.PodNamed("mnist-worker-0");
    const json exited = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Failed", code);
    worker0["status"] = exited["status"];
    worker0["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] =
        kube::FormatTime(lost - seconds(30));
    const Decision d = Reconcile(w.in, JudgedAtOnce());
    if (code == 1) {
      EXPECT_FALSE(d.job_restarted);
      EXPECT_EQ(Cond(d, "Failed").reason, "NonRetryableExitCode");
      EXPECT_EQ(FindEvent(d, "NodeLost"), nullptr);
    } else {
      ExpectRestartedForALostNode(d,
                                  "; then pod mnist-worker-0 exited with code 75 (peer lost); "
                                  "restarting all chief and worker pods");
    }
  }
}

// A pod that ended on a node lost afterwards is judged by how it ended.
TEST(LostNode, APodThatSucceededBeforeItsNodeWasLostIsNotLost) {
  NodeWorld w;
  w.in.job["spec"]["successPolicy"] = "AllWorkers";
  json& worker1 = w.PodNamed("mnist-worker-1");
  worker1["status"] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Succeeded", 0)["status"];
  w.SetNode("node-b", "Unknown", kT0 - seconds(5));
  const Decision d = Reconcile(w.in, Quiet());
  EXPECT_FALSE(d.job_restarted);
  EXPECT_EQ(FindEvent(d, "NodeLost"), nullptr);
}

TEST(LostNode, TheEvaluatorOnALostNodeIsMadeAgainTheGangGoesOn) {
  NodeWorld w;
  w.Bind("mnist-worker-0", "node-b");  // both workers on node-b, the evaluator alone on node-a
  w.SetNode("node-a", "Unknown", kT0 - seconds(10));
  Decision d = Reconcile(w.in, Quiet());
  EXPECT_FALSE(d.job_restarted);
  EXPECT_EQ(Deleted(d), std::vector<std::string>{"mnist-evaluator-0"});
  const Action* e = FindEvent(d, "NodeLost");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(
      e->message.rfind("evaluator pod mnist-evaluator-0 is on node node-a, which is not ready", 0),
      0u)
      << e->message;
  EXPECT_EQ(StatusOf(d).evaluator_restarts, 0);

  // Deleted, it is forced once its grace has passed, then made again.
  w.Deleting("mnist-evaluator-0", kT0);
  w.in.now = kT0 + seconds(60);
  d = Reconcile(w.in, Quiet());
  EXPECT_NE(ForceDeletion(d, "mnist-evaluator-0"), nullptr);
  EXPECT_EQ(FindEvent(d, "NodeLost"), nullptr) << "said once";
  w.in.pods.erase(
      std::remove_if(w.in.pods.begin(), w.in.pods.end(),
                     [](const json& p) { return p["metadata"]["name"] == "mnist-evaluator-0"; }),
      w.in.pods.end());
  d = Reconcile(w.in, Quiet());
  EXPECT_EQ(Created(d), std::vector<std::string>{"pods/mnist-evaluator-0"});
}

}  // namespace
}  // namespace tj::controller
