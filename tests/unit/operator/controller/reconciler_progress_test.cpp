// Progress (operator/controller/reconciler_progress.cpp): status.progress and status.evaluation
// from the trainers' /status answers (only values of the schema's kinds), the last backup's
// time, and the Running condition's note when the chief never answers.
#include <gtest/gtest.h>

#include "common/status_schema.h"
#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

TEST(Reconcile, ProgressAndEvaluationFromTrainerStatus) {
  World w;
  w.Running();
  w.in.trainer_status["mnist-worker-0"] = {{"role", "chief"},
                                           {"state", "training"},
                                           {"epoch", 2},
                                           {"total_epochs", 3},
                                           {"step", 10},
                                           {"global_step", 40},
                                           {"loss", 0.4},
                                           {"accuracy", 0.85},
                                           {"images_per_sec", 900.0},
                                           {"last_backup", {{"epoch", 1}, {"step", 0}}},
                                           {"evaluation", nullptr}};
  w.in.trainer_status["mnist-evaluator-0"] = {
      {"role", "evaluator"},
      {"evaluation", {{"checkpoint", "ckpt-1"}, {"epoch", 1}, {"loss", 0.5}, {"accuracy", 0.8}}}};
  auto s = StatusOf(Reconcile(w.in));
  EXPECT_EQ(s.progress["epoch"], 2);
  EXPECT_EQ(s.progress["totalEpochs"], 3);
  EXPECT_EQ(s.progress["step"], 10);
  EXPECT_EQ(s.progress["accuracy"], 0.85);
  EXPECT_EQ(s.progress["imagesPerSecond"], 900.0);
  EXPECT_EQ(s.progress["lastBackup"]["epoch"], 1);
  EXPECT_EQ(s.evaluation["checkpoint"], "ckpt-1");
  EXPECT_EQ(s.evaluation["accuracy"], 0.8);
}

// status.progress.lastBackup.time: when the operator first saw that backup; kept while the
// chief reports the same one, renewed with the next.
TEST(Reconcile, TheLastBackupsTimeIsWhenItWasFirstSeen) {
  World w;
  w.Running();
  w.in.trainer_status["mnist-worker-0"] = {{"last_backup", {{"epoch", 1}, {"step", 5}}}};
  const std::string first = kube::FormatTime(w.in.now);
  Decision d = Reconcile(w.in);
  EXPECT_EQ(StatusOf(d).progress["lastBackup"], (json{{"epoch", 1}, {"step", 5}, {"time", first}}));
  w.Keep(d);
  w.in.now += std::chrono::seconds(30);
  d = Reconcile(w.in);
  EXPECT_FALSE(d.status.has_value())
      << "the same backup keeps its time: " << d.status.value_or(json()).dump();
  w.in.trainer_status["mnist-worker-0"] = {{"last_backup", {{"epoch", 1}, {"step", 10}}}};
  const auto s = StatusOf(Reconcile(w.in));
  EXPECT_EQ(s.progress["lastBackup"]["time"], kube::FormatTime(w.in.now));
  EXPECT_EQ(s.progress["lastBackup"]["step"], 10);
}

// The resume point survives a gang restart: the stopped chief's termination message names the
// backup it ended with (newer than the last poll), and a new gang that has not saved yet
// still resumes from it.
TEST(Reconcile, TheLastBackupIsTheOneTheStoppedChiefReported) {
  World w;
  w.Running();
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", 2},
                                           {"last_backup", {{"epoch", 2}, {"step", 82}}}};
  Decision d = Reconcile(w.in);
  w.Keep(d);
  w.in.trainer_status.clear();
  w.in.now += std::chrono::seconds(20);
  // The gang stopped (worker 1 deleted; the chief backed up the agreed step and exited 75).
  for (int i : {0, 1}) {
    w.in.pods[i] = Pod(w.in.job, ReplicaType::kWorker, i, 0, "Failed", 75);
  }
  w.in.pods[1]["metadata"]["deletionTimestamp"] = kube::FormatTime(kT0);
  w.in.pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["message"] =
      R"({"lastBackup":{"epoch":3,"step":236,"time":"2026-01-01T00:00:09Z"}})";
  d = Reconcile(w.in);
  EXPECT_TRUE(d.job_restarted);
  EXPECT_EQ(StatusOf(d).progress["lastBackup"],
            (json{{"epoch", 3}, {"step", 236}, {"time", "2026-01-01T00:00:09Z"}}));
  w.Keep(d);
  // The new gang runs and answers, with no backup of its own yet.
  w.in.pods = {Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Running"),
               Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Running"), w.in.pods[2]};
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", 3}, {"step", 237}};
  d = Reconcile(w.in);
  EXPECT_EQ(StatusOf(d).progress["step"], 237);
  EXPECT_EQ(StatusOf(d).progress["lastBackup"]["step"], 236) << d.status->dump(2);
}

// A program that serves no /status: the Running condition says so once the gang has run a
// minute without an answer, once (later polls write nothing), and not after the first answer.
TEST(Reconcile, NoStatusAnswerIsSaidOnceInTheRunningCondition) {
  World w;
  w.Running();
  w.Keep(Reconcile(w.in));  // Running since kT0
  const std::string base = "all 2 chief/worker pods are running";
  ASSERT_EQ(api::TrainingJobStatus::FromJson(w.in.job["status"]).Find("Running")->message, base);
  w.in.now = kT0 + seconds(10);
  Decision early = Reconcile(w.in);
  EXPECT_FALSE(early.status.has_value());  // not yet
  ASSERT_TRUE(early.requeue_after.has_value());
  EXPECT_LE(*early.requeue_after, seconds(50));
  w.in.now = kT0 + seconds(61);
  Decision said = Reconcile(w.in);
  const api::Condition running = Cond(said, "Running");
  EXPECT_NE(running.message.find(base + "; the chief has not answered GET /status"),
            std::string::npos)
      << running.message;
  EXPECT_EQ(running.last_transition_time, kube::FormatTime(kT0));
  w.Keep(said);
  w.in.now = kT0 + seconds(90);
  EXPECT_FALSE(Reconcile(w.in).status.has_value());  // said once
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", 1}};
  Decision answered = Reconcile(w.in);
  EXPECT_EQ(Cond(answered, "Running").message, base);
  w.Keep(answered);
  w.in.trainer_status.clear();  // a poll that failed once after progress came: no note
  w.in.now = kT0 + seconds(200);
  EXPECT_FALSE(Reconcile(w.in).status.has_value());  // the message stays as it is
}

// The /status answer is the tenant's: values of another type than the schema's are not copied
// (the CRD would refuse the whole status write), the rest of the answer still is.
TEST(Reconcile, ProgressCopiesOnlyValuesOfTheSchemasTypes) {
  World w;
  w.Running();
  json nested = json::array();
  for (int i = 0; i < 50; ++i) nested = json::array({nested});
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", -1},
                                           {"total_epochs", 1.5},
                                           {"step", "10"},
                                           {"loss", nested},
                                           {"accuracy", 0.5},
                                           {"images_per_sec", {{"x", 1}}},
                                           {"last_backup", {{"epoch", 4294967296LL}, {"step", 3}}}};
  w.in.trainer_status["mnist-evaluator-0"] = {
      {"evaluation", {{"checkpoint", std::string(300, 'c')}, {"accuracy", 0.9}}}};
  auto s = StatusOf(Reconcile(w.in));
  EXPECT_EQ(s.progress, (json{{"accuracy", 0.5},
                              {"lastBackup", {{"step", 3}, {"time", kube::FormatTime(w.in.now)}}}}))
      << s.progress;
  EXPECT_TRUE(s.evaluation.is_null() || s.evaluation.empty()) << s.evaluation;
}

TEST(CopyStatusField, KindsAndBounds) {
  const json from = {{"n", 7},
                     {"neg", -7},
                     {"big", 2147483648LL},
                     {"f", 0.5},
                     {"s", "ckpt-3"},
                     {"long", std::string(257, 'x')},
                     {"o", json::object()}};
  json to = json::object();
  EXPECT_TRUE(CopyStatusField(from, {"n", status_schema::Kind::kCount}, to, "n"));
  EXPECT_FALSE(CopyStatusField(from, {"neg", status_schema::Kind::kCount}, to, "neg"));
  EXPECT_FALSE(CopyStatusField(from, {"big", status_schema::Kind::kCount}, to, "big"));
  EXPECT_FALSE(CopyStatusField(from, {"f", status_schema::Kind::kCount}, to, "f"));
  EXPECT_TRUE(CopyStatusField(from, {"f", status_schema::Kind::kNumber}, to, "f"));
  EXPECT_FALSE(CopyStatusField(from, {"s", status_schema::Kind::kNumber}, to, "s"));
  EXPECT_TRUE(CopyStatusField(from, {"s", status_schema::Kind::kText}, to, "s"));
  EXPECT_FALSE(CopyStatusField(from, {"long", status_schema::Kind::kText}, to, "long"));
  EXPECT_FALSE(CopyStatusField(from, {"o", status_schema::Kind::kText}, to, "o"));
  EXPECT_FALSE(CopyStatusField(from, {"absent", status_schema::Kind::kNumber}, to, "absent"));
  EXPECT_FALSE(CopyStatusField(json::array(), {"n", status_schema::Kind::kCount}, to, "n"));
  // Informational fields and objects are never copied as a value.
  EXPECT_FALSE(CopyStatusField(from, {"s", status_schema::Kind::kInfo}, to, "info"));
  EXPECT_FALSE(CopyStatusField(from, {"o", status_schema::Kind::kObject}, to, "object"));
  EXPECT_EQ(to, (json{{"n", 7}, {"f", 0.5}, {"s", "ckpt-3"}}));
}

// runPolicy.progressDeadlineSeconds: a gang whose chief's step stays put that long restarts
// with the cause Stalled (counted against backoffLimit by default), with an Event that says
// where it stopped; a step that advances, or a chief that never reported one, is not judged.
TEST(Reconcile, AStepThatStopsAdvancingRestartsTheGangAsStalled) {
  World w;
  w.in.job["spec"]["runPolicy"]["progressDeadlineSeconds"] = 60;
  w.Running();
  // No step reported yet: not judged, whatever the time.
  Decision d = Reconcile(w.in);
  EXPECT_FALSE(StatusOf(d).progress_time.has_value());
  w.in.now = kT0 + std::chrono::hours(1);
  EXPECT_FALSE(Reconcile(w.in).job_restarted);
  // The first step seen starts the clock, and a pass is asked for by the deadline.
  w.in.now = kT0;
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", 0}, {"step", 7}};
  d = Reconcile(w.in);
  ASSERT_TRUE(StatusOf(d).progress_time.has_value());
  EXPECT_EQ(*StatusOf(d).progress_time, kube::FormatTime(kT0));
  ASSERT_TRUE(d.requeue_after.has_value());
  EXPECT_LE(*d.requeue_after, std::chrono::seconds(60));
  w.Keep(d);
  // It advances: the clock starts again.
  w.in.now = kT0 + std::chrono::seconds(50);
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", 0}, {"step", 8}};
  d = Reconcile(w.in);
  EXPECT_FALSE(d.job_restarted);
  EXPECT_EQ(*StatusOf(d).progress_time, kube::FormatTime(w.in.now));
  w.Keep(d);
  // The same step at the next epoch is progress too.
  w.in.now = kT0 + std::chrono::seconds(100);
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", 1}, {"step", 8}};
  d = Reconcile(w.in);
  EXPECT_EQ(*StatusOf(d).progress_time, kube::FormatTime(w.in.now));
  w.Keep(d);
  // Then it stays put; the chief even stops answering: 60 s later the gang restarts.
  w.in.trainer_status.clear();
  w.in.now = kT0 + std::chrono::seconds(159);
  d = Reconcile(w.in);
  EXPECT_FALSE(d.job_restarted);
  w.Keep(d);
  w.in.now = kT0 + std::chrono::seconds(160);
  d = Reconcile(w.in);
  EXPECT_TRUE(d.job_restarted);
  const api::TrainingJobStatus st = StatusOf(d);
  EXPECT_EQ(st.restart_count, 1);
  EXPECT_EQ(st.restarts.by_cause.at("Stalled"), 1);
  EXPECT_EQ(st.restarts.backoff_limit_used, 1) << "a stall counts by default";
  EXPECT_FALSE(st.progress_time.has_value()) << "cleared for the next gang";
  const Action* e = FindEvent(d, "Stalled");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("the step stayed at {\"epoch\":1,\"step\":8} for 60s"),
            std::string::npos)
      << e->message;
  EXPECT_NE(e->message.find("mnist-worker-0 has stopped answering GET /status"), std::string::npos)
      << e->message;
}

// Without the field a stalled step is never judged.
TEST(Reconcile, WithoutAProgressDeadlineAStillStepIsLeftAlone) {
  World w;
  w.Running();
  w.in.trainer_status["mnist-worker-0"] = {{"epoch", 0}, {"step", 7}};
  Decision d = Reconcile(w.in);
  w.Keep(d);
  w.in.now = kT0 + std::chrono::hours(5);
  d = Reconcile(w.in);
  EXPECT_FALSE(d.job_restarted);
  EXPECT_FALSE(StatusOf(d).progress_time.has_value());
}

}  // namespace
}  // namespace tj::controller
