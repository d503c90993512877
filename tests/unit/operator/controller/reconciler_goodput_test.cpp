// Goodput (operator/controller/reconciler_goodput.cpp): what a restart costs, counted in
// status.goodput as the other rules act: the work since the last backup (time and global steps)
// and the recovery to the next gang's first step, charged to the restart's cause; the time to
// the first step; the ratio of the time trained.
#include <gtest/gtest.h>

#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

// One pass at kT0 + `seconds`, its status kept.
Decision PassAt(World& w, int seconds) {
  w.in.now = kT0 + std::chrono::seconds(seconds);
  Decision d = Reconcile(w.in);
  w.Keep(d);
  return d;
}

TEST(Goodput, ARestartsLostTimeAndStepsAreCountedUnderItsCause) {
  World w;
  w.in.job["metadata"]["creationTimestamp"] = kube::FormatTime(kT0);
  w.in.job["spec"]["runPolicy"]["progressDeadlineSeconds"] = 60;
  w.Running();
  // The first step, 10 s after the job was made: the gang trains from now on.
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", 1}, {"step", 7}, {"global_step", 7}};
  PassAt(w, 10);
  api::TrainingJobStatus st = api::TrainingJobStatus::FromJson(w.in.job["status"]);
  EXPECT_EQ(st.goodput.time_to_first_step_seconds, 10.0);
  EXPECT_EQ(st.goodput.training_since, kube::FormatTime(kT0 + std::chrono::seconds(10)));
  EXPECT_EQ(st.goodput.ratio, 0.0) << "nothing trained yet";
  // A backup at global step 30, seen at 40 s; the gang reaches step 37 and stays there.
  w.in.trainer_status["mnist-worker-0"] = {
      {"epoch", 1},
      {"step", 37},
      {"global_step", 37},
      {"last_backup", {{"epoch", 1}, {"step", 30}, {"global_step", 30}}}};
  PassAt(w, 40);
  // Stalled 60 s later: the 60 s since the backup and the 7 steps beyond it are lost.
  const Decision restart = PassAt(w, 100);
  ASSERT_TRUE(restart.job_restarted);
  st = api::TrainingJobStatus::FromJson(w.in.job["status"]);
  ASSERT_EQ(st.goodput.lost.count("Stalled"), 1U) << w.in.job["status"].dump();
  EXPECT_EQ(st.goodput.lost["Stalled"], (api::GoodputLoss{1, 60.0, 7}));
  EXPECT_EQ(st.goodput.recovering_cause, "Stalled");
  EXPECT_FALSE(st.goodput.training_since.has_value());
  EXPECT_EQ(restart.work_lost.at("Stalled"), (api::GoodputLoss{1, 60.0, 7}));
  // The next gang's first step 30 s later ends the recovery: charged to the same cause.
  w.in.pods = {Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Running"),
               Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Running"),
               Pod(w.in.job, ReplicaType::kEvaluator, 0, 0, "Running")};
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", 1}, {"step", 31}, {"global_step", 31}};
  const Decision recovered = PassAt(w, 130);
  st = api::TrainingJobStatus::FromJson(w.in.job["status"]);
  EXPECT_EQ(st.goodput.lost["Stalled"], (api::GoodputLoss{1, 90.0, 7}));
  EXPECT_FALSE(st.goodput.recovering_cause.has_value());
  EXPECT_EQ(st.goodput.time_to_first_step_seconds, 10.0) << "the job's first, not the gang's";
  // 130 s since creation: 10 before the first step and 90 lost; 30 trained.
  EXPECT_EQ(st.goodput.ratio, 0.231);
  EXPECT_EQ(recovered.goodput_ratio, 0.231);
  EXPECT_EQ(recovered.work_lost.at("Stalled").seconds, 30.0);
}

// A program that reports no step is not timed: no goodput, whatever happens to it.
TEST(Goodput, AProgramThatReportsNoStepIsNotTimed) {
  World w;
  w.in.job["metadata"]["creationTimestamp"] = kube::FormatTime(kT0);
  w.Running();
  w.in.trainer_status["mnist-worker-0"] = {{"state", "training"}};
  PassAt(w, 10);
  const api::TrainingJobStatus st = api::TrainingJobStatus::FromJson(w.in.job["status"]);
  EXPECT_FALSE(st.goodput.time_to_first_step_seconds.has_value());
  EXPECT_FALSE(st.goodput.ratio.has_value());
  EXPECT_FALSE(w.in.job["status"].contains("goodput")) << w.in.job["status"].dump();
}

TEST(Goodput, RoundTripsThroughTheStatus) {
  api::Goodput g;
  g.queued_seconds = 12.5;
  g.time_to_first_step_seconds = 3;
  g.lost["Preempted"] = {2, 40.25, 300};
  g.ratio = 0.75;
  g.recovering_cause = "Preempted";
  g.recovering_since = "2026-01-01T00:00:00Z";
  EXPECT_EQ(api::Goodput::FromJson(g.ToJson()), g);
  // The tenant cannot write status, but a malformed field is dropped, never trusted.
  const api::Goodput bad = api::Goodput::FromJson(
      {{"queuedSeconds", "x"}, {"lost", {{"Failed", {{"restarts", -1}, {"seconds", -5}}}}}});
  EXPECT_EQ(bad.queued_seconds, 0);
  EXPECT_EQ(bad.lost.at("Failed"), api::GoodputLoss{});
}

}  // namespace
}  // namespace tj::controller
