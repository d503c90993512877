// The gang (operator/controller/reconciler_gang.cpp): its pods created and counted, a failure
// failing the job or restarting the whole gang as the restart and failure policies say, the
// restart backoff, stale pods deleted, how a pod's end is classified and described.
#include <gtest/gtest.h>

#include <algorithm>

#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

TEST(Reconcile, PartialCreationIsCompletedNotRestarted) {
  World w;
  w.in.service = json::object();
  w.in.job["status"] = {
      {"restartCount", 0}, {"createdGeneration", -1}, {"rendezvousKeyHash", KeyHash("k")}};
  w.in.pods = {Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Pending")};
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Created(d),
            (std::vector<std::string>{"pods/mnist-worker-1", "pods/mnist-evaluator-0"}));
  EXPECT_FALSE(d.job_restarted);
}

TEST(Reconcile, AWholeGangCountsAsCreatedThoughTheStatusNeverSaidSo) {
  World w;
  w.Running();
  w.in.job["status"]["createdGeneration"] = -1;  // its creator's status write never came
  Decision d = Reconcile(w.in, JudgedAtOnce());
  EXPECT_TRUE(Created(d).empty());
  EXPECT_EQ(StatusOf(d).created_generation, 0);
  // So a pod that then disappears restarts the gang instead of being created again alone.
  w.Keep(d);
  w.in.pods.erase(w.in.pods.begin() + 1);
  Decision d2 = Reconcile(w.in, JudgedAtOnce());
  EXPECT_TRUE(Created(d2).empty()) << ::testing::PrintToString(Created(d2));
  EXPECT_TRUE(d2.job_restarted);
  EXPECT_EQ(StatusOf(d2).restart_count, 1);
}

// How worker 1 ends -> what happens to the job.
struct FailureCase {
  std::string name;
  std::string policy;
  std::string phase;  // Failed, or "Deleted" (gone), or "Deleting" (deletionTimestamp)
  std::optional<int> exit_code;
  std::string pod_reason;
  bool restart;  // else the job fails
  std::string message;
};

class FailureTest : public ::testing::TestWithParam<FailureCase> {};

TEST_P(FailureTest, RestartsTheGangOrFails) {
  const FailureCase& c = GetParam();
  World w;
  w.in.job["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = c.policy;
  w.Running();
  if (c.phase == "Deleted") {
    w.in.pods.erase(w.in.pods.begin() + 1);
  } else if (c.phase == "Deleting") {
    w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  } else {
    w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, c.phase, c.exit_code);
    if (!c.pod_reason.empty()) w.in.pods[1]["status"]["reason"] = c.pod_reason;
  }
  Decision d = Reconcile(w.in, JudgedAtOnce());
  auto s = StatusOf(d);
  if (c.restart) {
    EXPECT_EQ(s.restart_count, 1);
    EXPECT_EQ(s.created_generation, -1);
    EXPECT_EQ(Cond(d, "Restarting").status, "True");
    EXPECT_EQ(Cond(d, "Restarting").reason, "GangRestart");
    EXPECT_FALSE(s.IsTrue("Failed"));
    ASSERT_NE(FindEvent(d, "GangRestart"), nullptr);
    EXPECT_NE(FindEvent(d, "GangRestart")->message.find(c.message), std::string::npos)
        << FindEvent(d, "GangRestart")->message;
    EXPECT_EQ(FindEvent(d, "GangRestart")->event_type, "Warning");
    // Every chief/worker pod goes; the evaluator stays.
    std::vector<std::string> del = Deleted(d);
    EXPECT_NE(std::find(del.begin(), del.end(), "mnist-worker-0"), del.end());
    EXPECT_EQ(std::find(del.begin(), del.end(), "mnist-evaluator-0"), del.end());
    EXPECT_TRUE(Created(d).empty());
    EXPECT_TRUE(d.job_restarted);
  } else {
    EXPECT_TRUE(s.IsTrue("Failed"));
    EXPECT_NE(Cond(d, "Failed").message.find(c.message), std::string::npos)
        << Cond(d, "Failed").message;
    EXPECT_EQ(s.restart_count, 0);
    EXPECT_TRUE(s.completion_time);
    EXPECT_TRUE(d.job_failed);
    // cleanPodPolicy Running (default): the running pods go.
    std::vector<std::string> del = Deleted(d);
    EXPECT_NE(std::find(del.begin(), del.end(), "mnist-worker-0"), del.end());
    EXPECT_NE(std::find(del.begin(), del.end(), "mnist-evaluator-0"), del.end());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, FailureTest,
    ::testing::Values(
        FailureCase{"ExitCodeSignal", "ExitCode", "Failed", 137, "", true,
                    "exited with code 137 (signal 9)"},
        FailureCase{"ExitCodePeerLost", "ExitCode", "Failed", 75, "", true, "code 75 (peer lost)"},
        FailureCase{
            "ExitCodeOne", "ExitCode", "Failed", 1, "", false,
            "pod mnist-worker-1 exited with code 1, which restartPolicy ExitCode does not retry"},
        FailureCase{"ExitCodeUsage", "ExitCode", "Failed", 2, "", false, "code 2"},
        FailureCase{"ExitCodeDeleted", "ExitCode", "Deleted", std::nullopt, "", true,
                    "pod mnist-worker-1 was deleted"},
        FailureCase{"ExitCodeDeleting", "ExitCode", "Deleting", std::nullopt, "", true,
                    "pod mnist-worker-1 was deleted"},
        FailureCase{"ExitCodeEvicted", "ExitCode", "Failed", std::nullopt, "Evicted", true,
                    "pod mnist-worker-1 was evicted"},
        FailureCase{"ExitCodeNoStatus", "ExitCode", "Failed", std::nullopt, "", true, "failed"},
        FailureCase{"OnFailureOne", "OnFailure", "Failed", 1, "", true, "code 1"},
        FailureCase{"AlwaysOne", "Always", "Failed", 1, "", true, "code 1"},
        FailureCase{"NeverSignal", "Never", "Failed", 137, "", false, "restartPolicy Never"},
        FailureCase{"NeverOne", "Never", "Failed", 1, "", false, "code 1"},
        FailureCase{"NeverDeleted", "Never", "Deleted", std::nullopt, "", true, "was deleted"}),
    [](const ::testing::TestParamInfo<FailureCase>& i) { return i.param.name; });

TEST(Reconcile, NonRetryableFailureReasonNamesThePolicy) {
  World w;
  w.Running();
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 1);
  EXPECT_EQ(Cond(Reconcile(w.in, JudgedAtOnce()), "Failed").reason, "NonRetryableExitCode");
  w.in.job["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = "Never";
  EXPECT_EQ(Cond(Reconcile(w.in, JudgedAtOnce()), "Failed").reason, "PodFailed");
}

TEST(Reconcile, RestartNamesTheRootCauseNotThePeerThatLostIt) {
  World w;
  w.Running();
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Failed", 75);
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 137);
  Decision d = Reconcile(w.in);
  ASSERT_NE(FindEvent(d, "GangRestart"), nullptr);
  EXPECT_NE(FindEvent(d, "GangRestart")->message.find("mnist-worker-1 exited with code 137"),
            std::string::npos);
}

TEST(Reconcile, BackoffLimitFailsTheJob) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 2}};
  w.Running(2);
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 2, "Failed", 137);
  Decision d = Reconcile(w.in, JudgedAtOnce());
  EXPECT_EQ(Cond(d, "Failed").reason, "BackoffLimitExceeded");
  EXPECT_NE(Cond(d, "Failed").message.find("restarted 2 times, 2 of them counted (backoffLimit 2)"),
            std::string::npos)
      << Cond(d, "Failed").message;
  EXPECT_EQ(StatusOf(d).restart_count, 2);
}

// The failure policy's budget, one gang restart per row: how the ended pods look, what the
// spec's rules say, and what the restart costs. Each row starts from a job restarted once
// already (counted) with backoffLimit 2.
struct BudgetCase {
  std::string name;
  json rules;                       // spec.failurePolicy.rules; null: defaults
  std::function<void(World&)> end;  // ends pods of generation 1
  std::string outcome;              // "restart" | "BackoffLimitExceeded" | "FailurePolicy"
  std::string cause;                // the byCause entry that grows
  int used_after;                   // status.restarts.backoffLimitUsed afterwards
  std::string message;              // in the GangRestart Event / Failed message
};

class BudgetTest : public ::testing::TestWithParam<BudgetCase> {};

void SigtermedGang(World& w, bool evicted_still_listed) {
  // One worker was evicted (on v1.20: a deletion); both trainers stopped after the same step
  // with the retryable code.
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Failed", 75);
  if (evicted_still_listed) {
    w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed", 75);
    w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  } else {
    w.in.pods.erase(w.in.pods.begin() + 1);
  }
}

TEST_P(BudgetTest, ChargesTheRestartAsThePolicySays) {
  const BudgetCase& c = GetParam();
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 2}};
  if (!c.rules.is_null()) w.in.job["spec"]["failurePolicy"] = {{"rules", c.rules}};
  w.Running(1);
  w.in.job["status"]["restarts"] = {
      {"total", 1}, {"backoffLimitUsed", 1}, {"byCause", {{"Failed", 1}}}};
  c.end(w);
  Decision d = Reconcile(w.in, JudgedAtOnce());
  auto s = StatusOf(d);
  if (c.outcome == "restart") {
    ASSERT_FALSE(s.IsTrue("Failed")) << Cond(d, "Failed").message;
    EXPECT_EQ(s.restart_count, 2);
    ASSERT_NE(FindEvent(d, "GangRestart"), nullptr);
    EXPECT_NE(FindEvent(d, "GangRestart")->message.find(c.message), std::string::npos)
        << FindEvent(d, "GangRestart")->message;
    const int before = c.cause == "Failed" ? 1 : 0;
    EXPECT_EQ(s.restarts.by_cause[c.cause], before + 1);
    EXPECT_EQ(d.status->at("restarts").at("total"), 2);
  } else {
    EXPECT_EQ(Cond(d, "Failed").reason, c.outcome);
    EXPECT_NE(Cond(d, "Failed").message.find(c.message), std::string::npos)
        << Cond(d, "Failed").message;
    EXPECT_EQ(s.restart_count, 1);
  }
  EXPECT_EQ(s.restarts.backoff_limit_used, c.used_after);
}

std::vector<BudgetCase> BudgetCases() {
  return {
      BudgetCase{"SigtermedGangEvictedPodListed", nullptr, [](World& w) { SigtermedGang(w, true); },
                 "restart", "Deleted", 1,
                 "restart 2 (Deleted, not counted against backoffLimit 2): pod "
                 "mnist-worker-1 exited with code 75 (stopped on SIGTERM) and was deleted"},
      BudgetCase{"SigtermedGangEvictedPodGone", nullptr, [](World& w) { SigtermedGang(w, false); },
                 "restart", "Deleted", 1, "pod mnist-worker-1 was deleted"},
      BudgetCase{"KubeletEviction", nullptr,
                 [](World& w) {
                   w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed");
                   w.in.pods[1]["status"]["reason"] = "Evicted";
                 },
                 "restart", "Evicted", 1, "(Evicted, not counted against backoffLimit 2)"},
      // Kubernetes 1.26+: the Eviction API leaves DisruptionTarget on the pod, so the restart
      // is an eviction, not a deletion.
      BudgetCase{"EvictionApiDisruptionTarget", nullptr,
                 [](World& w) {
                   SigtermedGang(w, true);
                   w.in.pods[1]["status"]["conditions"] =
                       json::array({{{"type", "DisruptionTarget"},
                                     {"status", "True"},
                                     {"reason", "EvictionByEvictionAPI"}}});
                 },
                 "restart", "Evicted", 1,
                 "restart 2 (Evicted, not counted against backoffLimit 2): pod "
                 "mnist-worker-1 exited with code 75 (stopped on SIGTERM) and was evicted"},
      BudgetCase{"Preemption", nullptr,
                 [](World& w) {
                   w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
                   w.in.pods[1]["status"]["conditions"] =
                       json::array({{{"type", "DisruptionTarget"},
                                     {"status", "True"},
                                     {"reason", "PreemptionByScheduler"}}});
                 },
                 "restart", "Preempted", 1, "(Preempted, not counted"},
      BudgetCase{
          "ProgramFailureCounts", nullptr,
          [](World& w) { w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed", 137); },
          "restart", "Failed", 2, "restart 2 (Failed, 2 of backoffLimit 2)"},
      BudgetCase{"PeersLostWithoutADisruptionCount", nullptr,
                 [](World& w) {
                   w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Failed", 75);
                   w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed", 75);
                 },
                 "restart", "Failed", 2, "(Failed, 2 of backoffLimit 2)"},
      BudgetCase{"AProgramFailureIsNotHiddenByAnEviction", nullptr,
                 [](World& w) {
                   w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Failed", 137);
                   w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
                 },
                 "restart", "Failed", 2, "mnist-worker-0 exited with code 137"},
      BudgetCase{"SpentBudgetStillAllowsEvictions", nullptr,
                 [](World& w) {
                   w.in.job["status"]["restarts"]["backoffLimitUsed"] = 2;
                   w.in.pods[1]["status"]["reason"] = "Evicted";
                   w.in.pods[1]["status"]["phase"] = "Failed";
                 },
                 "restart", "Evicted", 2, "not counted"},
      BudgetCase{"SpentBudgetFailsOnAProgramFailure", nullptr,
                 [](World& w) {
                   w.in.job["status"]["restarts"]["backoffLimitUsed"] = 2;
                   w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed", 137);
                 },
                 "BackoffLimitExceeded", "", 2, "2 of them counted (backoffLimit 2)"},
      BudgetCase{"RuleMakesEvictionsCount",
                 json::array({{{"action", "RestartJob"}, {"onCauses", {"Evicted", "Deleted"}}}}),
                 [](World& w) { SigtermedGang(w, true); }, "restart", "Deleted", 2,
                 "(Deleted, 2 of backoffLimit 2)"},
      BudgetCase{
          "RuleFailsOnPreemption",
          json::array(
              {{{"name", "no-preemption"}, {"action", "FailJob"}, {"onCauses", {"Preempted"}}}}),
          [](World& w) {
            w.in.pods[1]["status"]["reason"] = "Preempting";
            w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
          },
          "FailurePolicy", "", 1, "cause Preempted: no-preemption fails the job"},
      BudgetCase{
          "RuleIgnoresProgramFailures",
          json::array({{{"action", "RestartJobAndIgnoreBackoffLimit"}, {"onCauses", {"Failed"}}}}),
          [](World& w) { w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Failed", 137); },
          "restart", "Failed", 1, "(Failed, not counted"}};
}

INSTANTIATE_TEST_SUITE_P(Policies, BudgetTest, ::testing::ValuesIn(BudgetCases()),
                         [](const ::testing::TestParamInfo<BudgetCase>& i) {
                           return i.param.name;
                         });

TEST(Reconcile, UnderNeverPeersThatLostAnEvictedPodRestartTheGang) {
  World w;
  w.in.job["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = "Never";
  w.Running();
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Failed", 75);
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 75);
  w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  Decision d = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d).IsTrue("Failed")) << Cond(d, "Failed").message;
  EXPECT_EQ(StatusOf(d).restart_count, 1);
  // Without the disruption, the same exit 75 is a failure that Never does not retry.
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 75);
  EXPECT_EQ(Cond(Reconcile(w.in), "Failed").reason, "PodFailed");
}

TEST(Reconcile, ZeroBackoffLimitFailsOnFirstRetryableFailure) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 0}};
  w.Running();
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 75);
  EXPECT_EQ(Cond(Reconcile(w.in, JudgedAtOnce()), "Failed").reason, "BackoffLimitExceeded");
}

TEST(Reconcile, GangRestartWaitsForOldPodsThenBackoffThenRecreates) {
  World w;
  w.Running();
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Failed", 137);
  Decision d1 = Reconcile(w.in, JudgedAtOnce());
  ASSERT_EQ(StatusOf(d1).restart_count, 1);
  w.Keep(d1);

  // Old pods still terminating: they are deleted (again, idempotent), nothing is created.
  w.in.now = kT0 + seconds(5);
  Decision d2 = Reconcile(w.in, JudgedAtOnce());
  EXPECT_TRUE(Created(d2).empty());
  EXPECT_EQ(Deleted(d2), (std::vector<std::string>{"mnist-worker-0", "mnist-worker-1"}));
  EXPECT_FALSE(d2.job_restarted);  // no second restart for the same failure
  w.Keep(d2);
  EXPECT_EQ(api::TrainingJobStatus::FromJson(w.in.job["status"]).restart_count, 1);

  // Old pods gone, inside the 1 s backoff: wait until it ends.
  w.in.pods = {w.in.pods[2]};
  w.in.now = kT0 + milliseconds(400);
  Decision d3 = Reconcile(w.in, JudgedAtOnce());
  EXPECT_TRUE(Created(d3).empty());
  ASSERT_TRUE(d3.requeue_after);
  EXPECT_LE(*d3.requeue_after, milliseconds(601));
  EXPECT_GE(*d3.requeue_after, milliseconds(600));

  // Backoff over: the new gang, generation 1.
  w.in.now = kT0 + seconds(2);
  Decision d4 = Reconcile(w.in, JudgedAtOnce());
  EXPECT_EQ(Created(d4), (std::vector<std::string>{"pods/mnist-worker-0", "pods/mnist-worker-1"}));
  for (const auto& a : d4.actions) {
    if (a.kind != Action::Kind::kCreate) continue;
    EXPECT_EQ(ObjectOf(a)["metadata"]["labels"]["tjo.dev/restart-count"], "1");
  }
  EXPECT_EQ(StatusOf(d4).created_generation, 1);
  EXPECT_NE(FindEvent(d4, "CreatedPods")->message.find("(restart 1)"), std::string::npos);
  w.Keep(d4);

  // They run: Restarting ends, Running again.
  w.in.pods = {Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Running"),
               Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Running"), w.in.pods[0]};
  Decision d5 = Reconcile(w.in, JudgedAtOnce());
  EXPECT_EQ(Cond(d5, "Running").status, "True");
  EXPECT_EQ(Cond(d5, "Restarting").status, "False");
  EXPECT_EQ(StatusOf(d5).restart_count, 1);
}

struct BackoffCase {
  int restart;
  int expect_ms;
};
class BackoffTest : public ::testing::TestWithParam<BackoffCase> {};
TEST_P(BackoffTest, DoublesUpToTheMax) {
  World w;
  w.Running(GetParam().restart);
  w.in.job["status"]["createdGeneration"] = -1;
  w.in.job["status"]["conditions"].push_back({{"type", "Restarting"},
                                              {"status", "True"},
                                              {"reason", "GangRestart"},
                                              {"lastTransitionTime", kube::FormatTime(kT0)},
                                              {"lastUpdateTime", kube::FormatTime(kT0)}});
  w.in.pods = {w.in.pods[2]};
  ReconcilerOptions o;
  o.restart_backoff_max = seconds(10);
  o.progress_poll = std::chrono::hours(1);
  Decision d = Reconcile(w.in, o);
  EXPECT_TRUE(Created(d).empty());
  ASSERT_TRUE(d.requeue_after);
  EXPECT_EQ(d.requeue_after->count(), GetParam().expect_ms + 1);
}
INSTANTIATE_TEST_SUITE_P(Exponential, BackoffTest,
                         ::testing::Values(BackoffCase{1, 1000}, BackoffCase{2, 2000},
                                           BackoffCase{3, 4000}, BackoffCase{4, 8000},
                                           BackoffCase{5, 10000}, BackoffCase{9, 10000}));

TEST(Reconcile, StalePodsOfRemovedReplicasAreDeleted) {
  World w;
  w.Running();
  w.in.pods.push_back(Pod(Job(3), ReplicaType::kWorker, 2, 0, "Running"));
  w.in.pods.back()["metadata"]["ownerReferences"][0]["uid"] = "uid-1";
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-worker-2"}));
}

// A pod of the gang that ended at `at` with `exit_code` (finishedAt as the kubelet writes it).
json EndedAt(const World& w, int index, int exit_code, kube::WallTime at) {
  json p = Pod(w.in.job, ReplicaType::kWorker, index, 0, "Failed", exit_code);
  p["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = kube::FormatTime(at);
  if (exit_code == 0) p["status"]["phase"] = "Succeeded";
  return p;
}

TEST(FirstFailure, AFailureWaitsForTheGangsOtherPodsThenTheSettleTime) {
  World w;
  w.Running();
  w.in.pods[1] = EndedAt(w, 1, 1, kT0);  // worker 0 still runs
  Decision d1 = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d1).Finished());
  EXPECT_FALSE(d1.job_restarted);
  EXPECT_TRUE(Deleted(d1).empty());
  EXPECT_EQ(StatusOf(d1).first_failure_time, kube::FormatTime(kT0));
  ASSERT_NE(FindEvent(d1, "GangFailing"), nullptr);
  EXPECT_NE(FindEvent(d1, "GangFailing")->message.find("waiting up to 30s for mnist-worker-0"),
            std::string::npos)
      << FindEvent(d1, "GangFailing")->message;
  ASSERT_TRUE(d1.requeue_after);
  EXPECT_EQ(*d1.requeue_after, milliseconds(30001));
  w.Keep(d1);

  // Later passes inside the settle time wait on, without a second Event.
  w.in.now = kT0 + seconds(10);
  Decision d2 = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d2).Finished());
  EXPECT_EQ(FindEvent(d2, "GangFailing"), nullptr);
  EXPECT_EQ(*d2.requeue_after, milliseconds(20001));

  // The settle time spent with worker 0 still running: judged as it stands.
  w.in.now = kT0 + seconds(30);
  Decision d3 = Reconcile(w.in);
  EXPECT_EQ(Cond(d3, "Failed").reason, "NonRetryableExitCode");
  EXPECT_NE(Cond(d3, "Failed").message.find("pod mnist-worker-1 exited with code 1"),
            std::string::npos);
  const std::vector<std::string> deleted = Deleted(d3);
  EXPECT_NE(std::find(deleted.begin(), deleted.end(), "mnist-worker-0"), deleted.end());
}

TEST(FirstFailure, APeersExitAfterAKillIsItsConsequenceWhateverItsCode) {
  // TensorFlow's survivors exit 1 when a peer is killed; the kill came first.
  World w;
  w.Running();
  w.in.pods[1] = EndedAt(w, 1, 137, kT0);
  w.in.pods[0] = EndedAt(w, 0, 1, kT0 + seconds(2));
  Decision d = Reconcile(w.in);  // every pod has ended: no wait
  EXPECT_FALSE(StatusOf(d).IsTrue("Failed")) << Cond(d, "Failed").message;
  EXPECT_TRUE(d.job_restarted);
  const Action* e = FindEvent(d, "GangRestart");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("pod mnist-worker-1 exited with code 137 (signal 9); then pod "
                            "mnist-worker-0 exited with code 1"),
            std::string::npos)
      << e->message;
  EXPECT_EQ(StatusOf(d).restarts.by_cause["Failed"], 1);
  EXPECT_FALSE(StatusOf(d).first_failure_time);  // cleared with the restart
}

TEST(FirstFailure, SeenInAnyOrderTheKillStillComesFirst) {
  // The survivor's exit reaches the operator first, the killed pod's a pass later.
  World w;
  w.Running();
  w.in.pods[0] = EndedAt(w, 0, 1, kT0 + seconds(1));
  Decision d1 = Reconcile(w.in);  // worker 1 still looks running: wait
  EXPECT_FALSE(StatusOf(d1).Finished());
  EXPECT_FALSE(d1.job_restarted);
  w.Keep(d1);
  w.in.now = kT0 + seconds(3);
  w.in.pods[1] = EndedAt(w, 1, 137, kT0);
  Decision d2 = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d2).IsTrue("Failed")) << Cond(d2, "Failed").message;
  EXPECT_TRUE(d2.job_restarted);
}

TEST(FirstFailure, AProgramErrorThatCameFirstFailsTheJobNamingItAndItsConsequences) {
  World w;
  w.Running();
  w.in.pods[0] = EndedAt(w, 0, 1, kT0);
  w.in.pods[1] = EndedAt(w, 1, 137, kT0 + seconds(1));
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Cond(d, "Failed").reason, "NonRetryableExitCode");
  EXPECT_NE(Cond(d, "Failed")
                .message.find(
                    "pod mnist-worker-0 exited with code 1, which restartPolicy ExitCode does not "
                    "retry; then pod mnist-worker-1 exited with code 137"),
            std::string::npos)
      << Cond(d, "Failed").message;
  EXPECT_EQ(StatusOf(d).restart_count, 0);
}

TEST(FirstFailure, AGangOfManyNamesAFewConsequencesAndCountsTheRest) {
  World w;
  w.in.job = Job(12);
  w.Running();
  w.in.pods.clear();
  w.in.pods.push_back(EndedAt(w, 0, 137, kT0));
  for (int i = 1; i < 12; ++i) w.in.pods.push_back(EndedAt(w, i, 1, kT0 + seconds(1)));
  Decision d = Reconcile(w.in);
  const Action* e = FindEvent(d, "GangRestart");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("exited with code 137"), std::string::npos) << e->message;
  EXPECT_NE(e->message.find(" and 7 more; restarting"), std::string::npos) << e->message;
  EXPECT_LT(e->message.size(), 600u) << e->message;
}

TEST(FirstFailure, InTheSameSecondARetryableFailureExplainsTheRest) {
  World w;
  w.Running();
  w.in.pods[0] = EndedAt(w, 0, 1, kT0);
  w.in.pods[1] = EndedAt(w, 1, 137, kT0);
  Decision d = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d).IsTrue("Failed")) << Cond(d, "Failed").message;
  EXPECT_TRUE(d.job_restarted);
}

TEST(FirstFailure, ADeletedPodComesBeforeThePeersThatLostIt) {
  World w;
  w.in.job["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = "Never";
  w.Running();
  w.in.pods[1] = EndedAt(w, 1, 75, kT0 + seconds(1));
  w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  w.in.pods[0] = EndedAt(w, 0, 1, kT0 + seconds(1));
  Decision d = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d).IsTrue("Failed")) << Cond(d, "Failed").message;
  EXPECT_EQ(StatusOf(d).restarts.by_cause["Deleted"], 1);
}

// A chief whose training has finished makes the job Succeeded, whatever happens to the other
// pods afterwards: a worker deleted while the chief writes its last files is never a reason
// to restart (the chief removed its backups: a new gang would train from scratch).
TEST(FirstFailure, AFinishedTrainingIsNeverRestarted) {
  World w;
  w.Running();
  // Worker 1 deleted while it runs (its trainer is at the end too).
  w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  Decision d1 = Reconcile(w.in);
  EXPECT_FALSE(d1.job_restarted);
  EXPECT_TRUE(Deleted(d1).empty());
  w.Keep(d1);
  // Its trainer exits 0 as it was deleted: a success, not a failure.
  w.in.now = kT0 + seconds(1);
  w.in.pods[1] = EndedAt(w, 1, 0, kT0 + seconds(1));
  w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  Decision d2 = Reconcile(w.in);
  EXPECT_FALSE(d2.job_restarted);
  EXPECT_TRUE(Deleted(d2).empty());
  w.Keep(d2);
  // Then gone, while the chief still writes its files: wait for it.
  w.in.now = kT0 + seconds(2);
  w.in.pods.erase(w.in.pods.begin() + 1);
  Decision d3 = Reconcile(w.in);
  EXPECT_FALSE(d3.job_restarted);
  EXPECT_TRUE(Deleted(d3).empty());
  w.Keep(d3);
  // The chief exits 0: the job succeeds (once the evaluator's final evaluation is in).
  w.in.now = kT0 + seconds(3);
  w.in.pods[0] = EndedAt(w, 0, 0, kT0 + seconds(3));
  w.in.pods[1]["status"]["phase"] = "Succeeded";  // the evaluator too
  Decision d4 = Reconcile(w.in);
  EXPECT_TRUE(StatusOf(d4).IsTrue("Succeeded")) << Cond(d4, "Failed").message;
  EXPECT_FALSE(d4.job_restarted);
  EXPECT_EQ(StatusOf(d4).restart_count, 0);
}

TEST(FirstFailure, AChiefThatExitedZeroThenWasDeletedHasSucceeded) {
  World w;
  w.in.job["spec"]["replicaSpecs"].erase("Evaluator");
  w.Running();
  w.in.pods[0] = EndedAt(w, 0, 0, kT0);
  w.in.pods[0]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0 + seconds(1));
  w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0 + seconds(1));
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(StatusOf(d).IsTrue("Succeeded")) << d.status->dump(2);
  EXPECT_FALSE(d.job_restarted);
}

// An evicted pod, being deleted since kT0 with a grace period of 30 s: DisruptionTarget set.
json Evicted(json pod) {
  pod["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0 + seconds(30));
  pod["metadata"]["deletionGracePeriodSeconds"] = 30;
  pod["status"]["conditions"] = json::array({{{"type", "DisruptionTarget"},
                                              {"status", "True"},
                                              {"reason", "EvictionByEvictionAPI"},
                                              {"lastTransitionTime", kube::FormatTime(kT0)}}});
  return pod;
}

// The evicted pod goes from the API server as soon as its trainer exits, while the operator
// waits for the rest of the gang: its last view (departed_pods.h) still says it was evicted.
TEST(FirstFailure, AnEvictedPodThatWentWhileTheGangEndedIsStillEvicted) {
  World w;
  w.Running();
  w.in.pods[1] = Evicted(w.in.pods[1]);
  Decision d1 = Reconcile(w.in);  // worker 0 still runs, worker 1 terminates: wait
  EXPECT_FALSE(d1.job_restarted);
  w.Keep(d1);
  w.in.now = kT0 + seconds(2);
  w.in.departed = {ViewOfPod(Evicted(EndedAt(w, 1, 75, kT0 + seconds(1))))};
  w.in.pods.erase(w.in.pods.begin() + 1);
  w.in.pods[0] = EndedAt(w, 0, 75, kT0 + seconds(1));
  Decision d2 = Reconcile(w.in);
  EXPECT_TRUE(d2.job_restarted);
  EXPECT_EQ(StatusOf(d2).restarts.by_cause, (std::map<std::string, int32_t>{{"Evicted", 1}}))
      << d2.status->dump(2);
  EXPECT_EQ(StatusOf(d2).restarts.backoff_limit_used, 0);
  // A pod of another gang under the same name is not the one that went.
  World other;
  other.Running();
  other.in.pods.erase(other.in.pods.begin() + 1);
  other.in.pods[0] = EndedAt(other, 0, 75, kT0 + seconds(1));
  json earlier = Evicted(EndedAt(other, 1, 75, kT0));
  earlier["metadata"]["labels"][api::kLabelRestartCount] = "7";
  other.in.departed = {ViewOfPod(earlier)};
  Decision d3 = Reconcile(other.in);
  EXPECT_EQ(StatusOf(d3).restarts.by_cause, (std::map<std::string, int32_t>{{"Deleted", 1}}));
}

// The API server dates a graceful deletion at the end of its grace period: the eviction (at
// kT0, due at kT0 + 30 s) came before the survivor's exit 1 at kT0 + 2 s, and explains it.
TEST(FirstFailure, ADeletionIsDatedFromWhenItWasAskedFor) {
  World w;
  w.Running();
  w.in.pods[1] = Evicted(EndedAt(w, 1, 75, kT0 + seconds(3)));
  w.in.pods[0] = EndedAt(w, 0, 1, kT0 + seconds(2));
  Decision d = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d).IsTrue("Failed")) << Cond(d, "Failed").message;
  EXPECT_TRUE(d.job_restarted);
  EXPECT_EQ(StatusOf(d).restarts.by_cause["Evicted"], 1);
}

// A worker whose trainer finished (exit 0) and whose pod then went: a success, not a loss.
TEST(FirstFailure, AGoneWorkerThatHadExitedZeroHasSucceeded) {
  World w;
  w.in.job["spec"]["replicaSpecs"].erase("Evaluator");
  w.Running();
  json last = EndedAt(w, 1, 0, kT0);
  last["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  w.in.departed = {ViewOfPod(last)};
  w.in.pods.erase(w.in.pods.begin() + 1);
  w.in.pods[0] = EndedAt(w, 0, 0, kT0 + seconds(1));
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(StatusOf(d).IsTrue("Succeeded")) << d.status->dump(2);
  EXPECT_FALSE(d.job_restarted);
}

TEST(Outcome, Classification) {
  EXPECT_TRUE(IsRetryable(api::RestartPolicy::kExitCode, {true, false, 143, ""}));
  EXPECT_TRUE(IsRetryable(api::RestartPolicy::kExitCode, {true, false, 128, ""}));
  EXPECT_FALSE(IsRetryable(api::RestartPolicy::kExitCode, {true, false, 127, ""}));
  EXPECT_TRUE(IsRetryable(api::RestartPolicy::kExitCode, {true, false, 75, ""}));
  EXPECT_FALSE(IsRetryable(api::RestartPolicy::kNever, {true, false, 75, ""}));
  EXPECT_TRUE(IsRetryable(api::RestartPolicy::kNever, {true, true, std::nullopt, ""}));
  EXPECT_EQ(Describe("p", {true, false, 143, ""}), "pod p exited with code 143 (signal 15)");
  EXPECT_EQ(Describe("p", {true, true, std::nullopt, "Evicted"}), "pod p was evicted");
  // Still terminating, attributed from DisruptionTarget: its cause's word, not "deleted".
  EXPECT_EQ(Describe("p", {true, true, std::nullopt, "", api::RestartCause::kEvicted}),
            "pod p was evicted");
  EXPECT_EQ(Describe("p", {true, true, std::nullopt, "", api::RestartCause::kPreempted}),
            "pod p was preempted");
  EXPECT_EQ(Describe("p", {true, true, std::nullopt, "", api::RestartCause::kDeleted}),
            "pod p was deleted");
}

}  // namespace
}  // namespace tj::controller
