// BackupAndRestore for tj-trainer: the chief saves the training state to a backup directory
// (every epoch or every N steps); on start every worker restores the newest valid backup.
//
// Where: --backup-dir, or its subdirectory job-<uid> when the job's UID is known
// (TJ_JOB_UID), so that two jobs given the same directory never read, overwrite or delete each
// other's backups. Files there:
//   backup-<seq>   a state file (state_file.h); seq grows by one per Save, starting at 1.
//                  Save keeps the newest two, so when the newest is torn or corrupt the
//                  previous one is still there. Records the gang that wrote it.
//   fence          {"gang": G, "base_seq": N}: the newest gang (TJ_RESTART_COUNT) that claimed
//                  the directory, and the newest backup of this job's own (signed with its
//                  key) there when it did, 0 for none (see Claim).
//   .backup-<seq>.tmp.<writer>.XXXXXX   an in-flight (or crashed) write; never read. A writer
//                  removes only its own: another one may be in flight, and a crashed
//                  writer's (one per crash mid-write) stays until the directory is removed.
// Every file is read with ReadVolumeFile (volume_file.h): a FIFO, a directory, a link or an
// oversized file in their place is refused unread, never waited on.
// Every file is written atomically (temporary file, fsync, rename, fsync of the directory),
// so a crash at any point leaves the newest complete backup in place.
//
// Fencing: a chief of an older gang may outlive its gang (a partitioned node). Once a newer
// gang has claimed the directory, the old chief's Save refuses to write, and a backup it
// still manages to rename in (its check raced the claim) is never restored: only backups
// that were there at the claim, or that the claiming gang wrote, are.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/checkpoint/state_file.h"
#include "trainer/cluster/config/gang_identity.h"

namespace tj::checkpoint {

class BackupManager {
 public:
  // `log` receives warnings (a skipped corrupt backup); not owned, may be null (then stderr).
  // `identity` says whose backups these are: its job_uid (letters, digits and '-', a
  // Kubernetes UID; see ValidJobUid) names the job's own subdirectory (none when empty: the
  // directory itself, a run by hand); its gang fences them (none when negative); every backup
  // is authenticated with its job_key, and a backup under another key is skipped like a
  // corrupt one (an empty key: integrity only).
  BackupManager(std::string dir, EventLog* log, cluster::GangIdentity identity = {});
  BackupManager(const BackupManager&) = delete;
  BackupManager& operator=(const BackupManager&) = delete;

  const std::string& dir() const { return dir_; }

  static bool ValidJobUid(std::string_view uid);

  // The chief of a gang, before Restore: claims the directory for its gang. Fails (and the
  // process must not write or restore backups) when a newer gang claimed it already. Removes
  // the backups that an older gang's stale chief wrote after the previous claim. Without a
  // gang (identity.gang < 0) it does nothing.
  Status Claim();

  // Writes the next backup-<seq> (creating the directory if needed), then removes all but the
  // newest two backups and this writer's own leftover temporary files. Call from the one
  // writer (the chief). Refuses when a newer gang has claimed the directory. Out of space is
  // StatusCode::kResourceExhausted (the caller may try again at its next save point).
  Status Save(TrainingState state);

  // The newest valid backup:
  //  - no directory, or no backup-* files in it: nullopt (a fresh start);
  //  - the newest is missing/torn/truncated/corrupt, not signed with identity.job_key, too large or
  //    nested too deep: a warning naming the file and the reason, then the previous one is
  //    tried, and so on;
  //  - backups present but none valid: an error listing each file and its reason; except when
  //    every one is intact but under another key (the job's Secret was made again with a new
  //    key, or the files were planted), or when this gang's claim found no backup of the job's
  //    own there (a fresh job: they were planted): then a warning naming them, and a fresh
  //    start;
  //  - the newest valid backup has a fingerprint other than `expected_fingerprint`: an error
  //    naming every field that differs;
  //  - a backup written by a fenced-out chief after the last claim is skipped with a warning.
  // `restored_path`, when given, receives the path of the backup restored.
  // Read-only: safe to call from every worker at once.
  StatusOr<std::optional<TrainingState>> Restore(const nlohmann::json& expected_fingerprint,
                                                 std::string* restored_path = nullptr);

  // Whether a backup of fingerprint `found` may be restored: nullopt when it may, else why
  // not and what to do, a clause that follows "backup <path> ".
  using FingerprintCheck = std::function<std::optional<std::string>(const nlohmann::json& found)>;
  // Restore, with `check` deciding on the newest valid backup's fingerprint instead of
  // equality with an expected one.
  StatusOr<std::optional<TrainingState>> Restore(const FingerprintCheck& check,
                                                 std::string* restored_path = nullptr);

  // Removes every backup, the fence and this writer's temporary files (after training
  // succeeded); --backup-dir itself stays (it may be a volume's root). A missing directory is
  // not an error.
  Status Delete();

  // backup-<seq> files present, newest first: {seq, path}.
  StatusOr<std::vector<std::pair<int64_t, std::string>>> ListBackups() const;

  static std::string FileName(int64_t seq);                         // "backup-<seq>"
  static std::optional<int64_t> ParseFileName(const std::string&);  // inverse, else nullopt

 private:
  struct Fence {
    int64_t gang = -1;  // -1: never claimed
    int64_t base_seq = 0;
  };
  void Warn(const std::string& message);
  StatusOr<Fence> ReadFence() const;
  // An error when a gang newer than this process's has claimed the directory.
  Status CheckNotFencedOut(const Fence& fence) const;
  // Creates the directory and reads the fence; an error when fenced out.
  StatusOr<Fence> PrepareToWrite() const;
  // Whether backup-<seq> written by `writer_gang` may be restored under `fence`.
  static bool Restorable(const Fence& fence, int64_t seq, int64_t writer_gang);

  std::string dir_;
  EventLog* log_;
  cluster::GangIdentity identity_;
  std::string writer_;  // this writer's part of its temporary files' names: g<gang>-<random>
};

}  // namespace tj::checkpoint
