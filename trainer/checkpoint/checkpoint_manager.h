// Per-epoch checkpoints for tj-trainer and the evaluator that follows them.
//
// Files in the checkpoint directory:
//   ckpt-<epoch>   a state file (state_file.h) written after epoch <epoch> (1-based);
//                  the newest K are kept.
//   ckpt-final     JSON {"final_epoch": E, "checkpoint": "ckpt-E", "hmac": "<hex>"}, written
//                  after ckpt-E when training has ended: the evaluator stops after evaluating
//                  ckpt-E. The HMAC, under the job's key, is of FinalMarkerText(E): a marker
//                  planted on the shared volume cannot stop the evaluator early.
//   .<name>.tmp.XXXXXX   in-flight writes; never read.
// All files are written atomically (temporary file, fsync, rename, fsync of the directory).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trainer/checkpoint/state_file.h"

namespace tj::checkpoint {

inline constexpr char kFinalMarkerName[] = "ckpt-final";

std::string CheckpointName(int64_t epoch);                            // "ckpt-<epoch>"
std::optional<int64_t> ParseCheckpointName(const std::string& name);  // inverse, else nullopt

struct CheckpointEntry {
  int64_t epoch = 0;
  std::string name;  // "ckpt-<epoch>"
  std::string path;  // dir/name
};

// The ckpt-<epoch> files in `dir`, oldest first. A missing directory lists as empty.
StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(const std::string& dir);

// The bytes the final marker's HMAC covers: "tj-trainer final marker: ckpt-<epoch>".
std::string FinalMarkerText(int64_t final_epoch);

// The final epoch named by dir/ckpt-final, or nullopt when there is no marker. A marker that
// is present but unreadable (not a regular file, over 4 KiB, not the marker's JSON, or not
// signed with `key`, the job's key) is an error naming the file; it is read with
// ReadVolumeFile, never waited on.
StatusOr<std::optional<int64_t>> ReadFinalMarker(const std::string& dir, std::string_view key);

class CheckpointManager {
 public:
  // `keep` <= 0 keeps every checkpoint. `key`: the job's key the checkpoints are
  // authenticated with (state_file.h); empty for a run by hand.
  explicit CheckpointManager(std::string dir, int keep = 5, std::string key = {});

  const std::string& dir() const { return dir_; }

  // Writes dir/ckpt-<state.epoch> (creating the directory if needed), then removes all but the
  // newest `keep` checkpoints and leftover temporary files. Returns the path written.
  // Call from the one writer (the chief).
  StatusOr<std::string> Save(const TrainingState& state);

  // Writes dir/ckpt-final naming `final_epoch`, signed with the key. Call after Save() of that
  // epoch.
  Status WriteFinalMarker(int64_t final_epoch);

  // Removes dir/ckpt-final (a fresh run reusing the directory); absent is not an error.
  Status ClearFinalMarker();

 private:
  std::string dir_;
  int keep_;
  std::string key_;
};

}  // namespace tj::checkpoint
