#include "trainer/checkpoint/checkpoint_watcher.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/temp_dir.h"
#include "trainer/checkpoint/checkpoint_manager.h"

namespace tj::checkpoint {
namespace {

using Kind = WatchDecision::Kind;
using testing::ReadBytes;
using testing::TempDir;
using testing::WriteBytes;

CheckpointDirSnapshot Snap(std::vector<int64_t> epochs, std::optional<int64_t> final_epoch = {}) {
  return CheckpointDirSnapshot{std::move(epochs), final_epoch};
}

// ---- The pure planner.

TEST(CheckpointWatchPlannerTest, WaitsWhenThereIsNothing) {
  CheckpointWatchPlanner p;
  EXPECT_EQ(p.Next(Snap({})).kind, Kind::kWait);
}

TEST(CheckpointWatchPlannerTest, TakesTheNewestAndSkipsIntermediates) {
  CheckpointWatchPlanner p;
  WatchDecision d = p.Next(Snap({1}));
  EXPECT_EQ(d.kind, Kind::kEvaluate);
  EXPECT_EQ(d.epoch, 1);
  p.MarkEvaluated(1);
  EXPECT_EQ(p.Next(Snap({1})).kind, Kind::kWait);
  d = p.Next(Snap({4, 2, 1, 3}));  // fell behind on 2 and 3
  EXPECT_EQ(d.kind, Kind::kEvaluate);
  EXPECT_EQ(d.epoch, 4);
  EXPECT_EQ(d.skipped, (std::vector<int64_t>{2, 3}));
  p.MarkEvaluated(4);
  EXPECT_EQ(p.Next(Snap({2, 3, 4})).kind, Kind::kWait);  // never goes back
}

TEST(CheckpointWatchPlannerTest, DoneOnlyAfterTheFinalCheckpointIsEvaluated) {
  CheckpointWatchPlanner p;
  WatchDecision d = p.Next(Snap({1, 2, 3}, 3));
  EXPECT_EQ(d.kind, Kind::kEvaluate);
  EXPECT_EQ(d.epoch, 3);
  EXPECT_EQ(p.Next(Snap({3}, 3)).kind, Kind::kEvaluate);  // not evaluated yet: not done
  p.MarkEvaluated(3);
  EXPECT_EQ(p.Next(Snap({3}, 3)).kind, Kind::kDone);
}

TEST(CheckpointWatchPlannerTest, DoneWithoutAMarkerNever) {
  CheckpointWatchPlanner p;
  p.MarkEvaluated(10);
  EXPECT_EQ(p.Next(Snap({10})).kind, Kind::kWait);
}

TEST(CheckpointWatchPlannerTest, RetriesAFailedReadThenGivesUpAndMovesOn) {
  CheckpointWatchPlanner p(3);
  EXPECT_EQ(p.Next(Snap({2})).epoch, 2);
  EXPECT_FALSE(p.MarkReadFailed(2));
  EXPECT_EQ(p.Next(Snap({2})).epoch, 2);  // retried
  EXPECT_FALSE(p.MarkReadFailed(2));
  EXPECT_EQ(p.Next(Snap({2})).epoch, 2);
  EXPECT_TRUE(p.MarkReadFailed(2));                   // third failure: given up
  EXPECT_EQ(p.Next(Snap({1, 2})).kind, Kind::kWait);  // not 2 again, and not back to 1
  WatchDecision d = p.Next(Snap({1, 2, 3}));
  EXPECT_EQ(d.kind, Kind::kEvaluate);
  EXPECT_EQ(d.epoch, 3);
}

TEST(CheckpointWatchPlannerTest, AReadThatSucceedsOnRetryResetsTheCount) {
  CheckpointWatchPlanner p(2);
  EXPECT_FALSE(p.MarkReadFailed(1));
  p.MarkEvaluated(1);
  EXPECT_FALSE(p.MarkReadFailed(2));  // a fresh count for a new checkpoint
  EXPECT_TRUE(p.MarkReadFailed(2));
}

TEST(CheckpointWatchPlannerTest, ANewerCheckpointSupersedesOneThatKeepsFailing) {
  CheckpointWatchPlanner p(3);
  EXPECT_FALSE(p.MarkReadFailed(2));
  WatchDecision d = p.Next(Snap({2, 3}));
  EXPECT_EQ(d.epoch, 3);
  EXPECT_EQ(d.skipped, (std::vector<int64_t>{2}));
  EXPECT_FALSE(p.MarkReadFailed(3));  // the count restarts for 3
}

TEST(CheckpointWatchPlannerTest, FailsWhenTheFinalCheckpointIsUnreadable) {
  CheckpointWatchPlanner p(2);
  EXPECT_EQ(p.Next(Snap({5}, 5)).epoch, 5);
  EXPECT_FALSE(p.MarkReadFailed(5));
  EXPECT_TRUE(p.MarkReadFailed(5));
  WatchDecision d = p.Next(Snap({5}, 5));
  EXPECT_EQ(d.kind, Kind::kFail);
  EXPECT_NE(d.reason.find("ckpt-5"), std::string::npos) << d.reason;
}

TEST(CheckpointWatchPlannerTest, TriesTheFinalCheckpointEvenWhenNotListedYet) {
  CheckpointWatchPlanner p;
  p.MarkEvaluated(2);
  WatchDecision d = p.Next(Snap({2}, 3));
  EXPECT_EQ(d.kind, Kind::kEvaluate);
  EXPECT_EQ(d.epoch, 3);
}

// ---- The loop, against a real directory and a FakeClock.

TrainingState Epoch(int64_t e) {
  TrainingState s;
  s.epoch = e;
  s.tensors = {{"weights", {static_cast<float>(e)}}};
  return s;
}

struct Recorder {
  std::vector<std::string> names;
  std::vector<int64_t> epochs;
  CheckpointWatcher::EvaluateFn Fn() {
    return [this](const TrainingState& s, const std::string& name) {
      names.push_back(name);
      epochs.push_back(s.epoch);
      return Status::Ok();
    };
  }
};

TEST(CheckpointWatcherTest, EvaluatesNewestSkipsIntermediatesAndExitsAfterFinal) {
  TempDir dir;
  CheckpointManager writer(dir.path(), 10);
  FakeClock clock;
  CheckpointWatcher watcher(dir.path(), &clock, nullptr, {std::chrono::seconds(5), 3, 0, ""});
  Recorder rec;

  auto d = watcher.PollOnce(rec.Fn());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, Kind::kWait);  // nothing yet, and the directory may not exist yet

  ASSERT_TRUE(writer.Save(Epoch(1)).ok());
  d = watcher.PollOnce(rec.Fn());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, Kind::kEvaluate);

  for (int e = 2; e <= 4; ++e) ASSERT_TRUE(writer.Save(Epoch(e)).ok());  // evaluator fell behind
  ASSERT_TRUE(writer.WriteFinalMarker(4).ok());
  auto result = watcher.Run(rec.Fn());
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(result->final_evaluated);
  EXPECT_EQ(result->last_epoch, 4);
  EXPECT_EQ(result->evaluations, 2);
  EXPECT_EQ(rec.names, (std::vector<std::string>{"ckpt-1", "ckpt-4"}));
  EXPECT_EQ(rec.epochs, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(clock.Now(), Clock::TimePoint{});  // nothing to wait for
}

TEST(CheckpointWatcherTest, WaitsThePollIntervalBetweenEmptyPolls) {
  TempDir dir;
  FakeClock clock;
  CheckpointWatcher watcher(dir.path(), &clock, nullptr, {std::chrono::seconds(5), 3, 0, ""});
  Recorder rec;
  int rounds = 0;
  auto result = watcher.Run(rec.Fn(), [&] { return ++rounds > 4; });
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->final_evaluated);
  EXPECT_EQ(clock.Now() - Clock::TimePoint{}, std::chrono::seconds(20));
}

TEST(CheckpointWatcherTest, RetriesACheckpointStillBeingWrittenUntilItIsComplete) {
  TempDir dir;
  CheckpointManager writer(dir.path(), 10);
  ASSERT_TRUE(writer.Save(Epoch(1)).ok());
  const std::string full = ReadBytes(dir.Join("ckpt-1"));
  WriteBytes(dir.Join("ckpt-1"), full.substr(0, full.size() / 3));  // a non-atomic writer
  ASSERT_TRUE(writer.WriteFinalMarker(1).ok());

  FakeClock clock;
  CheckpointWatcher watcher(dir.path(), &clock, nullptr, {std::chrono::seconds(1), 5, 0, ""});
  Recorder rec;
  int rounds = 0;
  auto result = watcher.Run(rec.Fn(), [&] {
    if (++rounds == 3) WriteBytes(dir.Join("ckpt-1"), full);  // the write completes
    return false;
  });
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(result->final_evaluated);
  EXPECT_EQ(rec.names, (std::vector<std::string>{"ckpt-1"}));
  EXPECT_EQ(clock.Now() - Clock::TimePoint{}, std::chrono::seconds(2));  // two failed reads
}

TEST(CheckpointWatcherTest, SkipsACorruptCheckpointAfterBoundedRetriesWithAWarning) {
  TempDir dir;
  CheckpointManager writer(dir.path(), 10);
  ASSERT_TRUE(writer.Save(Epoch(1)).ok());
  std::string b = ReadBytes(dir.Join("ckpt-1"));
  b[b.size() - 40] ^= 1;
  WriteBytes(dir.Join("ckpt-1"), b);

  FILE* err = std::tmpfile();
  EventLog log(LogFormat::kJson, stdout, err);
  FakeClock clock;
  CheckpointWatcher watcher(dir.path(), &clock, &log, {std::chrono::seconds(1), 3, 0, ""});
  Recorder rec;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(watcher.PollOnce(rec.Fn()).ok());
  auto d = watcher.PollOnce(rec.Fn());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, Kind::kWait);  // given up on ckpt-1
  ASSERT_TRUE(writer.Save(Epoch(2)).ok());
  ASSERT_TRUE(writer.WriteFinalMarker(2).ok());
  auto result = watcher.Run(rec.Fn());
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(rec.names, (std::vector<std::string>{"ckpt-2"}));

  std::rewind(err);
  char buf[8192] = {};
  std::fread(buf, 1, sizeof buf - 1, err);
  std::fclose(err);
  const std::string text(buf);
  EXPECT_NE(text.find("nothing of it read); will retry"), std::string::npos) << text;
  EXPECT_NE(text.find(dir.Join("ckpt-1") + ": digest mismatch"), std::string::npos) << text;
  EXPECT_NE(text.find("giving up on it after 3 attempts"), std::string::npos) << text;
}

TEST(CheckpointWatcherTest, UnreadableFinalCheckpointEndsWithAnError) {
  TempDir dir;
  CheckpointManager writer(dir.path(), 10);
  ASSERT_TRUE(writer.WriteFinalMarker(7).ok());  // marker names a checkpoint that never comes
  FakeClock clock;
  CheckpointWatcher watcher(dir.path(), &clock, nullptr, {std::chrono::seconds(1), 4, 0, ""});
  Recorder rec;
  auto result = watcher.Run(rec.Fn());
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("ckpt-7 could not be read after 4 attempts"),
            std::string::npos)
      << result.status().message();
  EXPECT_TRUE(rec.names.empty());
}

TEST(CheckpointWatcherTest, AnEvaluationErrorEndsTheLoopWithContext) {
  TempDir dir;
  CheckpointManager writer(dir.path(), 10);
  ASSERT_TRUE(writer.Save(Epoch(1)).ok());
  FakeClock clock;
  CheckpointWatcher watcher(dir.path(), &clock, nullptr);
  auto result = watcher.Run(
      [](const TrainingState&, const std::string&) { return Status::Error("shape mismatch"); });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "evaluating " + dir.Join("ckpt-1") + ": shape mismatch");
}

TEST(CheckpointWatcherTest, StopsAfterMaxEvaluations) {
  TempDir dir;
  CheckpointManager writer(dir.path(), 10);
  ASSERT_TRUE(writer.Save(Epoch(1)).ok());
  FakeClock clock;
  CheckpointWatcher watcher(dir.path(), &clock, nullptr, {std::chrono::seconds(1), 3, 1, ""});
  Recorder rec;
  auto result = watcher.Run(rec.Fn());
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->evaluations, 1);
  EXPECT_FALSE(result->final_evaluated);
}

TEST(CheckpointWatcherTest, SnapshotReadsEpochsAndMarker) {
  TempDir dir;
  CheckpointManager writer(dir.path(), 10);
  ASSERT_TRUE(writer.Save(Epoch(2)).ok());
  ASSERT_TRUE(writer.Save(Epoch(1)).ok());
  ASSERT_TRUE(writer.WriteFinalMarker(2).ok());
  auto s = SnapshotCheckpointDir(dir.path(), "");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->epochs, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(s->final_epoch, 2);
}

}  // namespace
}  // namespace tj::checkpoint
