// Writes BackupAndRestore backups on a background thread, so the training steps do not wait
// for encoding, fsync and rename. At most one write is in flight: Submit() first waits for
// the previous one. The backup_saved event is printed once the file is durable, so a
// process killed after that line can count on the backup.
#pragma once

#include <future>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/checkpoint/backup_manager.h"
#include "trainer/train/progress.h"

namespace tj::train {

class BackupWriter {
 public:
  // `backups`, `log` and `progress` are borrowed and must outlive the writer.
  BackupWriter(checkpoint::BackupManager* backups, EventLog* log, Progress* progress)
      : backups_(backups), log_(log), progress_(progress) {}
  ~BackupWriter() { (void)Wait(); }
  BackupWriter(const BackupWriter&) = delete;
  BackupWriter& operator=(const BackupWriter&) = delete;

  // Starts writing `state` (a snapshot the writer now owns), reported as (epoch, step).
  // Returns the error of the previous write, if it failed (then nothing new is started).
  // A previous write that ran out of space is not an error: it is logged as a warning and
  // this save point tries again.
  Status Submit(checkpoint::TrainingState state, int epoch, int64_t step);
  // Waits for the write in flight, if any; returns its error (out of space: a warning only).
  Status Wait();
  // Backups skipped so far for lack of space.
  int skipped() const { return skipped_; }
  // CPU seconds the writer thread spent on the backups finished so far (encoding, digest,
  // write, fsync): what backups take from the training threads at most. Read after Wait().
  double cpu_seconds() const { return cpu_seconds_; }

 private:
  checkpoint::BackupManager* backups_;
  EventLog* log_;
  Progress* progress_;
  std::future<Status> pending_;
  double cpu_seconds_ = 0.0;  // written by the write in flight only; read after Wait()
  int skipped_ = 0;
};

}  // namespace tj::train
