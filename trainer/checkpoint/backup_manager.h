// BackupAndRestore for tj-trainer: the chief saves the training state to a backup directory
// (every epoch or every N steps); on start every worker restores the newest valid backup.
//
// Files in the backup directory:
//   backup-<seq>   a state file (state_file.h); seq grows by one per Save, starting at 1.
//                  Save keeps the newest two, so when the newest is torn or corrupt the
//                  previous one is still there.
//   .backup-<seq>.tmp.XXXXXX   an in-flight (or crashed) write; never read, removed by Save.
// Every file is written atomically (temporary file, fsync, rename, fsync of the directory),
// so a crash at any point leaves the newest complete backup in place.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/checkpoint/state_file.h"

namespace tj::checkpoint {

class BackupManager {
 public:
  // `log` receives warnings (a skipped corrupt backup); not owned, may be null (then stderr).
  BackupManager(std::string dir, EventLog* log);
  BackupManager(const BackupManager&) = delete;
  BackupManager& operator=(const BackupManager&) = delete;

  const std::string& dir() const { return dir_; }

  // Writes the next backup-<seq> (creating the directory if needed), then removes all but the
  // newest two backups and any leftover temporary files. Call from the one writer (the chief).
  Status Save(const TrainingState& state);

  // The newest valid backup:
  //  - no directory, or no backup-* files in it: nullopt (a fresh start);
  //  - the newest is missing/torn/truncated/corrupt: a warning naming the file and the reason,
  //    then the previous one is tried, and so on;
  //  - backups present but none valid: an error listing each file and its reason;
  //  - the newest valid backup has a fingerprint other than `expected_fingerprint`: an error
  //    naming every field that differs.
  // `restored_path`, when given, receives the path of the backup restored.
  // Read-only: safe to call from every worker at once.
  StatusOr<std::optional<TrainingState>> Restore(const nlohmann::json& expected_fingerprint,
                                                 std::string* restored_path = nullptr);

  // Removes every backup and temporary file (after training succeeded); the directory itself
  // stays (it may be a volume's root). A missing directory is not an error.
  Status Delete();

  // backup-<seq> files present, newest first: {seq, path}.
  StatusOr<std::vector<std::pair<int64_t, std::string>>> ListBackups() const;

  static std::string FileName(int64_t seq);                         // "backup-<seq>"
  static std::optional<int64_t> ParseFileName(const std::string&);  // inverse, else nullopt

 private:
  void Warn(const std::string& message);

  std::string dir_;
  EventLog* log_;
};

}  // namespace tj::checkpoint
