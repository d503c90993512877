// The evaluator (operator/controller/reconciler_evaluator.cpp): restarted alone, with its own
// backoff and budget, and its final evaluation awaited, for a bounded time, before success.
#include <gtest/gtest.h>

#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

TEST(Reconcile, EvictedEvaluatorDoesNotUseItsBudget) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 1}};
  w.Running();
  // The kubelet evicted it under node pressure: it was killed, and says why.
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Failed", 137);
  w.in.pods[2]["status"]["reason"] = "Evicted";
  for (int i = 0; i < 3; ++i) {
    w.in.now = kT0 + std::chrono::hours(1 + i);
    Decision d = Reconcile(w.in);
    ASSERT_NE(FindEvent(d, "EvaluatorRestart"), nullptr) << "eviction " << i;
    EXPECT_NE(FindEvent(d, "EvaluatorRestart")->message.find("Evicted, not counted"),
              std::string::npos);
    w.Keep(d);
  }
  EXPECT_EQ(
      api::TrainingJobStatus::FromJson(w.in.job["status"]).restarts.evaluator_backoff_limit_used,
      0);
  // A failure of its program does.
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Failed", 137);
  w.in.now += std::chrono::hours(1);
  Decision d = Reconcile(w.in);
  ASSERT_NE(FindEvent(d, "EvaluatorRestart"), nullptr);
  EXPECT_NE(FindEvent(d, "EvaluatorRestart")->message.find("1 of 1"), std::string::npos);
}

TEST(Reconcile, SuccessWaitsForTheEvaluatorThenSucceeds) {
  World w;
  w.Running();
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Succeeded", 0);
  w.in.pods[1] = Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Succeeded", 0);
  w.in.now = kT0 + seconds(10);
  Decision d1 = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d1).Finished());
  EXPECT_EQ(Cond(d1, "Running").reason, "WaitingForEvaluator");
  EXPECT_TRUE(Deleted(d1).empty());  // the evaluator is not killed
  ASSERT_TRUE(d1.requeue_after);
  w.Keep(d1);

  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Succeeded", 0);
  w.in.final_evaluation["mnist-evaluator-0"] = {{"event", "evaluation"},
                                                {"checkpoint", "ckpt-final"},
                                                {"epoch", 2},
                                                {"loss", 0.3},
                                                {"accuracy", 0.9}};
  Decision d2 = Reconcile(w.in);
  auto s = StatusOf(d2);
  EXPECT_TRUE(s.IsTrue("Succeeded"));
  EXPECT_EQ(Cond(d2, "Succeeded").reason, "JobSucceeded");
  EXPECT_EQ(Cond(d2, "Running").status, "False");
  EXPECT_EQ(s.evaluation["checkpoint"], "ckpt-final");
  EXPECT_EQ(s.evaluation["accuracy"], 0.9);
  EXPECT_FALSE(s.evaluation.contains("event"));
  EXPECT_EQ(s.completion_time, kube::FormatTime(w.in.now));
  EXPECT_NE(FindEvent(d2, "JobSucceeded")->message.find("0.9"), std::string::npos);
  EXPECT_TRUE(d2.job_succeeded);
  EXPECT_EQ(s.state, "Succeeded");
}

TEST(Reconcile, EvaluatorGraceIsBounded) {
  World w;
  w.Running();
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Succeeded", 0);
  ReconcilerOptions o;
  o.evaluator_grace = seconds(60);
  w.in.now = kT0 + seconds(61);
  Decision d = Reconcile(w.in, o);
  EXPECT_TRUE(StatusOf(d).IsTrue("Succeeded"));
  EXPECT_NE(Cond(d, "Succeeded").message.find("did not finish within 60s"), std::string::npos);
  // cleanPodPolicy Running: the evaluator and worker 1 are still running, so they go now.
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-worker-1", "mnist-evaluator-0"}));
}

TEST(Reconcile, EvaluatorRestartsAloneWhenRetryable) {
  World w;
  w.Running();
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Failed", 137);
  w.in.now = kT0 + seconds(1);  // its first backoff (1 s from when it ended) is over
  Decision d = Reconcile(w.in);
  EXPECT_EQ(Deleted(d), (std::vector<std::string>{"mnist-evaluator-0"}));
  EXPECT_EQ(StatusOf(d).evaluator_restarts, 1);
  EXPECT_NE(FindEvent(d, "EvaluatorRestart"), nullptr);
  EXPECT_EQ(StatusOf(d).restart_count, 0);
  EXPECT_FALSE(d.job_restarted);
  // Gone: created again, alone.
  w.in.pods.pop_back();
  w.Keep(d);
  Decision d2 = Reconcile(w.in);
  EXPECT_EQ(Created(d2), (std::vector<std::string>{"pods/mnist-evaluator-0"}));
}

TEST(Reconcile, EvaluatorRestartsBackOffAndAreBounded) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 2}};
  w.Running();
  w.in.job["status"]["evaluatorRestarts"] = 1;
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Failed", 137);
  ReconcilerOptions o;
  o.progress_poll = std::chrono::hours(1);
  // Ended at kT0; the second restart waits 2 s.
  w.in.now = kT0 + seconds(1);
  Decision d1 = Reconcile(w.in, o);
  EXPECT_TRUE(Deleted(d1).empty());
  EXPECT_EQ(*d1.requeue_after, milliseconds(1001));
  w.in.now = kT0 + seconds(2);
  Decision d2 = Reconcile(w.in, o);
  EXPECT_EQ(Deleted(d2), (std::vector<std::string>{"mnist-evaluator-0"}));
  EXPECT_EQ(StatusOf(d2).evaluator_restarts, 2);
  EXPECT_NE(FindEvent(d2, "EvaluatorRestart")->message.find("(2 of 2)"), std::string::npos);
  // At the limit: left failed, said once.
  w.Keep(d2);
  Decision d3 = Reconcile(w.in, o);
  EXPECT_TRUE(Deleted(d3).empty());
  ASSERT_NE(FindEvent(d3, "EvaluatorGaveUp"), nullptr);
  w.Keep(d3);
  Decision d4 = Reconcile(w.in, o);
  EXPECT_EQ(FindEvent(d4, "EvaluatorGaveUp"), nullptr);
  EXPECT_TRUE(Deleted(d4).empty());
  EXPECT_FALSE(StatusOf(d4).Finished());
}

TEST(Reconcile, EvaluatorNonRetryableFailureLeavesTheJobRunning) {
  World w;
  w.Running();
  w.in.pods[2] = Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Failed", 1);
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(Deleted(d).empty());
  EXPECT_FALSE(StatusOf(d).Finished());
  EXPECT_EQ(StatusOf(d).replica_statuses["Evaluator"], (api::ReplicaStatus{0, 0, 1}));
  // And success then does not wait for it.
  w.in.pods[0] = Pod(w.in.job, ReplicaType::kWorker, 0, 0, "Succeeded", 0);
  EXPECT_TRUE(StatusOf(Reconcile(w.in)).IsTrue("Succeeded"));
}

}  // namespace
}  // namespace tj::controller
