// The evaluator's view of the checkpoint directory (Keras' SidecarEvaluator, done better):
// evaluate the newest checkpoint not yet evaluated, skip the intermediates it fell behind on,
// retry one that cannot be read yet (still being written, torn, digest mismatch) a bounded
// number of times, and stop after the final checkpoint (the one ckpt-final names).
//
// CheckpointWatchPlanner is the pure decision core (no I/O, no time); CheckpointWatcher is
// the thin loop that lists the directory, reads files, calls `evaluate` and sleeps.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/event_log.h"
#include "common/status.h"
#include "trainer/checkpoint/state_file.h"

namespace tj::checkpoint {

// What the directory holds at one instant.
struct CheckpointDirSnapshot {
  std::vector<int64_t> epochs;         // ckpt-<epoch> files present, any order
  std::optional<int64_t> final_epoch;  // from ckpt-final, when present
};

struct WatchDecision {
  enum class Kind {
    kEvaluate,  // read and evaluate ckpt-<epoch>
    kWait,      // nothing new: poll again after the interval
    kDone,      // the final checkpoint has been evaluated: exit 0
    kFail,      // the final checkpoint can never be evaluated: exit with `reason`
  };
  Kind kind = Kind::kWait;
  int64_t epoch = -1;            // kEvaluate: the checkpoint to evaluate
  std::vector<int64_t> skipped;  // kEvaluate: older unevaluated checkpoints passed over
  std::string reason;            // kFail
};

// Pure: decides from a snapshot and what happened so far. Not thread-safe.
class CheckpointWatchPlanner {
 public:
  // A checkpoint that fails to read `max_read_attempts` times is given up on.
  explicit CheckpointWatchPlanner(int max_read_attempts = 5);

  // Only checkpoints newer than both the last evaluated one and the newest given-up one are
  // candidates; the newest candidate wins. When ckpt-final names E and E (or later) has been
  // evaluated: kDone. When E was given up on: kFail. When the marker names E but ckpt-E is not
  // listed, kEvaluate E anyway (its read then fails and is retried like any other).
  WatchDecision Next(const CheckpointDirSnapshot& snapshot) const;

  void MarkEvaluated(int64_t epoch);
  // Records a failed read of ckpt-<epoch>; true when that was the last attempt and the
  // checkpoint is now given up on.
  bool MarkReadFailed(int64_t epoch);

  std::optional<int64_t> last_evaluated() const { return last_evaluated_; }
  int max_read_attempts() const { return max_read_attempts_; }

 private:
  int max_read_attempts_;
  std::optional<int64_t> last_evaluated_;
  std::optional<int64_t> newest_given_up_;
  int64_t failing_epoch_ = -1;  // the checkpoint whose reads are failing
  int failed_reads_ = 0;        // consecutive failed reads of failing_epoch_
};

struct CheckpointWatcherOptions {
  Clock::Duration poll_interval = std::chrono::seconds(2);
  int max_read_attempts = 5;
  int64_t max_evaluations = 0;  // > 0: stop (OK) after this many evaluations, as Keras does
  std::string key;              // the job's key the checkpoints were written with (state_file.h)
};

struct WatchResult {
  int64_t evaluations = 0;
  std::optional<int64_t> last_epoch;  // the last checkpoint evaluated
  bool final_evaluated = false;       // false when stopped by should_stop / max_evaluations
};

// Takes a snapshot of `dir` (missing directory: empty). An unreadable ckpt-final, or one not
// signed with `key` (ReadFinalMarker), is reported as an error; the watcher treats that as
// "no marker yet" with a warning.
StatusOr<CheckpointDirSnapshot> SnapshotCheckpointDir(const std::string& dir, std::string_view key);

class CheckpointWatcher {
 public:
  // `state` is the checkpoint read and verified; `name` is "ckpt-<epoch>". An error from it
  // ends Run() with that error (it is not retried).
  using EvaluateFn = std::function<Status(const TrainingState& state, const std::string& name)>;

  // `clock` and `log` are not owned; `log` may be null (warnings then go to stderr).
  CheckpointWatcher(std::string dir, Clock* clock, EventLog* log,
                    CheckpointWatcherOptions options = {});

  // One round: snapshot, decide, and evaluate at most one checkpoint. Never sleeps.
  StatusOr<WatchDecision> PollOnce(const EvaluateFn& evaluate);

  // Polls until the final checkpoint is evaluated (OK, final_evaluated), max_evaluations is
  // reached, or `should_stop` (checked before every round; may be empty) returns true.
  // Errors: the final checkpoint unreadable after the retries, `evaluate` failing, or the
  // directory unlistable.
  StatusOr<WatchResult> Run(const EvaluateFn& evaluate,
                            const std::function<bool()>& should_stop = {});

  const CheckpointWatchPlanner& planner() const { return planner_; }

 private:
  void Warn(const std::string& message);

  std::string dir_;
  Clock* clock_;
  EventLog* log_;
  CheckpointWatcherOptions options_;
  CheckpointWatchPlanner planner_;
  int64_t evaluations_ = 0;
};

}  // namespace tj::checkpoint
