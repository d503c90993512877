#include "trainer/checkpoint/checkpoint_watcher.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "trainer/checkpoint/checkpoint_manager.h"

namespace tj::checkpoint {

CheckpointWatchPlanner::CheckpointWatchPlanner(int max_read_attempts)
    : max_read_attempts_(std::max(1, max_read_attempts)) {}

WatchDecision CheckpointWatchPlanner::Next(const CheckpointDirSnapshot& snapshot) const {
  WatchDecision d;
  const auto& final_epoch = snapshot.final_epoch;
  if (final_epoch && last_evaluated_ && *last_evaluated_ >= *final_epoch) {
    d.kind = WatchDecision::Kind::kDone;
    return d;
  }
  if (final_epoch && newest_given_up_ && *newest_given_up_ >= *final_epoch) {
    d.kind = WatchDecision::Kind::kFail;
    d.reason = "the final checkpoint " + CheckpointName(*final_epoch) +
               " could not be read after " + std::to_string(max_read_attempts_) + " attempts";
    return d;
  }
  int64_t floor = -1;  // candidates are strictly newer than this
  if (last_evaluated_) floor = std::max(floor, *last_evaluated_);
  if (newest_given_up_) floor = std::max(floor, *newest_given_up_);
  std::vector<int64_t> candidates;
  for (int64_t e : snapshot.epochs) {
    if (e > floor) candidates.push_back(e);
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  if (final_epoch && *final_epoch > floor &&
      std::find(candidates.begin(), candidates.end(), *final_epoch) == candidates.end() &&
      (candidates.empty() || candidates.back() < *final_epoch)) {
    candidates.push_back(*final_epoch);  // named by the marker but not listed: try it anyway
  }
  if (candidates.empty()) return d;  // kWait
  d.kind = WatchDecision::Kind::kEvaluate;
  d.epoch = candidates.back();
  d.skipped.assign(candidates.begin(), candidates.end() - 1);
  return d;
}

void CheckpointWatchPlanner::MarkEvaluated(int64_t epoch) {
  if (!last_evaluated_ || epoch > *last_evaluated_) last_evaluated_ = epoch;
  if (epoch == failing_epoch_) {
    failing_epoch_ = -1;
    failed_reads_ = 0;
  }
}

bool CheckpointWatchPlanner::MarkReadFailed(int64_t epoch) {
  if (epoch != failing_epoch_) {
    failing_epoch_ = epoch;
    failed_reads_ = 0;
  }
  if (++failed_reads_ < max_read_attempts_) return false;
  if (!newest_given_up_ || epoch > *newest_given_up_) newest_given_up_ = epoch;
  failing_epoch_ = -1;
  failed_reads_ = 0;
  return true;
}

StatusOr<CheckpointDirSnapshot> SnapshotCheckpointDir(const std::string& dir,
                                                      std::string_view key) {
  CheckpointDirSnapshot snapshot;
  auto entries = ListCheckpoints(dir);
  if (!entries.ok()) return entries.status();
  for (const auto& e : *entries) snapshot.epochs.push_back(e.epoch);
  auto final_epoch = ReadFinalMarker(dir, key);
  if (!final_epoch.ok()) return final_epoch.status();
  snapshot.final_epoch = *final_epoch;
  return snapshot;
}

CheckpointWatcher::CheckpointWatcher(std::string dir, Clock* clock, EventLog* log,
                                     CheckpointWatcherOptions options)
    : dir_(std::move(dir)),
      clock_(clock),
      log_(log),
      options_(std::move(options)),
      planner_(options_.max_read_attempts) {}

void CheckpointWatcher::Warn(const std::string& message) {
  if (log_ != nullptr) {
    log_->Warn(message);
  } else {
    std::fprintf(stderr, "warning: %s\n", message.c_str());
  }
}

StatusOr<WatchDecision> CheckpointWatcher::PollOnce(const EvaluateFn& evaluate) {
  CheckpointDirSnapshot snapshot;
  auto entries = ListCheckpoints(dir_);
  if (!entries.ok()) return entries.status();
  for (const auto& e : *entries) snapshot.epochs.push_back(e.epoch);
  auto final_epoch = ReadFinalMarker(dir_, options_.key);
  if (final_epoch.ok()) {
    snapshot.final_epoch = *final_epoch;
  } else {
    Warn(final_epoch.status().message() + "; treating it as absent for now");
  }

  WatchDecision decision = planner_.Next(snapshot);
  if (decision.kind != WatchDecision::Kind::kEvaluate) return decision;

  const std::string name = CheckpointName(decision.epoch);
  const std::string path = (std::filesystem::path(dir_) / name).string();
  StatusOr<TrainingState> state = ReadStateFile(path, options_.key);
  if (!state.ok()) {
    const bool gave_up = planner_.MarkReadFailed(decision.epoch);
    Warn("cannot read checkpoint " + state.status().message() +
         (gave_up ? "; giving up on it after " + std::to_string(planner_.max_read_attempts()) +
                        " attempts"
                  : "; will retry"));
    return decision;
  }
  TJ_RETURN_IF_ERROR(evaluate(*state, name).WithContext("evaluating " + path));
  planner_.MarkEvaluated(decision.epoch);
  ++evaluations_;
  return decision;
}

StatusOr<WatchResult> CheckpointWatcher::Run(const EvaluateFn& evaluate,
                                             const std::function<bool()>& should_stop) {
  WatchResult result;
  while (!(should_stop && should_stop())) {
    StatusOr<WatchDecision> decision = PollOnce(evaluate);
    if (!decision.ok()) return decision.status();
    result.evaluations = evaluations_;
    result.last_epoch = planner_.last_evaluated();
    switch (decision->kind) {
      case WatchDecision::Kind::kDone:
        result.final_evaluated = true;
        return result;
      case WatchDecision::Kind::kFail:
        return Status::Error("checkpoint directory " + dir_ + ": " + decision->reason);
      case WatchDecision::Kind::kEvaluate:
        if (options_.max_evaluations > 0 && evaluations_ >= options_.max_evaluations) return result;
        // Evaluated: look again at once (the final marker may already be there). A failed
        // read waits for the interval before the retry.
        if (planner_.last_evaluated() == decision->epoch) continue;
        break;
      case WatchDecision::Kind::kWait:
        break;
    }
    clock_->SleepFor(options_.poll_interval);
  }
  return result;
}

}  // namespace tj::checkpoint
