#include "trainer/train/backup_writer.h"

#include <time.h>

#include <chrono>

#include "common/clock.h"
#include "common/status_schema.h"

namespace tj::train {
namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

Status BackupWriter::Wait() {
  if (!pending_.valid()) return Status::Ok();
  Status s = pending_.get();
  if (s.code() == StatusCode::kResourceExhausted) {
    // Out of space is not the end of training: the previous backup is intact, and the next
    // save point tries again (space may have been freed, or older files removed by then).
    ++skipped_;
    log_->Warn(s.message() +
               "; training goes on without this backup and the next save point tries again "
               "(free space on the backup volume)");
    return Status::Ok();
  }
  return s;
}

Status BackupWriter::Submit(checkpoint::TrainingState state, int epoch, int64_t step) {
  TJ_RETURN_IF_ERROR(Wait());
  const int64_t global_step = state.optimizer_iterations;
  pending_ = std::async(
      std::launch::async, [this, state = std::move(state), epoch, step, global_step]() mutable {
        auto start = RealClock::Get()->Now();
        const double cpu_start = ThreadCpuSeconds();
        Status s = backups_->Save(std::move(state));
        const double cpu = ThreadCpuSeconds() - cpu_start;
        cpu_seconds_ += cpu;
        if (!s.ok()) return s.WithContext("writing a backup to " + backups_->dir());
        double seconds = SecondsBetween(start, RealClock::Get()->Now());
        log_->Emit({{"event", "backup_saved"},
                    {"epoch", epoch},
                    {"step", step},
                    {"seconds", seconds},
                    {"cpu_seconds", cpu}});
        progress_->Update([&](ProgressSnapshot& p) {
          // The time it became durable: the termination message's (termination_message.h).
          p.last_backup =
              nlohmann::json{{status_schema::kEpoch.key, epoch},
                             {status_schema::kStep.key, step},
                             {status_schema::kGlobalStep.key, global_step},
                             {"time", EventLog::FormatTime(std::chrono::system_clock::now())}};
        });
        return Status::Ok();
      });
  return Status::Ok();
}

}  // namespace tj::train
