#include "trainer/checkpoint/backup_manager.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "common/json_nesting.h"
#include "common/secure_random.h"
#include "common/sha256.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/checkpoint/numbered_name.h"
#include "trainer/checkpoint/volume_file.h"

namespace tj::checkpoint {
namespace fs = std::filesystem;

namespace {
constexpr std::string_view kPrefix = "backup-";
constexpr char kFenceName[] = "fence";
constexpr char kGangField[] = "backup_gang";  // in a backup's "extra": the gang that wrote it
constexpr size_t kKeep = 2;                   // the newest and the one before it
constexpr size_t kMaxFenceBytes = 4096;       // {"gang": G, "base_seq": N} is under 64

// This writer's part of its temporary files' names: its gang, pid and a random part
// ("g3-1234-89ab..."), so that it removes only its own debris and a reader can tell whose
// a leftover is.
std::string WriterName(int64_t gang) {
  uint8_t random[8] = {};
  (void)SecureRandomBytes(random, sizeof random);  // on failure: unique enough with the pid
  return (gang >= 0 ? "g" + std::to_string(gang) : std::string("x")) + "-" +
         std::to_string(::getpid()) + "-" + ToHex(random);
}

int64_t GangOfState(const TrainingState& state) {
  if (!state.extra.is_object()) return -1;
  auto it = state.extra.find(kGangField);
  return it != state.extra.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

}  // namespace

BackupManager::BackupManager(std::string dir, EventLog* log, cluster::GangIdentity identity)
    : dir_(identity.job_uid.empty() ? std::move(dir)
                                    : (fs::path(dir) / ("job-" + identity.job_uid)).string()),
      log_(log),
      identity_(std::move(identity)),
      writer_(WriterName(identity_.gang)) {}

bool BackupManager::ValidJobUid(std::string_view uid) {
  if (uid.empty() || uid.size() > 128) return false;
  return std::all_of(uid.begin(), uid.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
  });
}

StatusOr<BackupManager::Fence> BackupManager::ReadFence() const {
  const std::string path = (fs::path(dir_) / kFenceName).string();
  // The fence is on the shared volume too: read bounded and never waited on (a FIFO), parsed
  // only when flat.
  StatusOr<std::optional<std::string>> read = ReadVolumeFile(path, kMaxFenceBytes);
  if (!read.ok()) return read.status().WithContext("reading backup fence");
  if (!read->has_value()) return Fence{};
  const std::string& text = **read;
  const nlohmann::json j = JsonNesting(text) > 1
                               ? nlohmann::json(nlohmann::json::value_t::discarded)
                               : nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("gang") || !j["gang"].is_number_integer() ||
      !j.contains("base_seq") || !j["base_seq"].is_number_integer()) {
    return Status::Error("reading backup fence: " + path +
                         ": not {\"gang\": N, \"base_seq\": N}; remove it only if no older "
                         "gang's chief can still be running");
  }
  return Fence{j["gang"].get<int64_t>(), j["base_seq"].get<int64_t>()};
}

Status BackupManager::CheckNotFencedOut(const Fence& fence) const {
  if (identity_.gang < 0 || fence.gang <= identity_.gang) return Status::Ok();
  return Status::Error("backups in " + dir_ + " belong to gang " + std::to_string(fence.gang) +
                       " of this job; this process is of gang " + std::to_string(identity_.gang) +
                       ", an older one, and must not write or restore them (a stale chief: the "
                       "job has moved on)");
}

bool BackupManager::Restorable(const Fence& fence, int64_t seq, int64_t writer_gang) {
  return fence.gang < 0 || seq <= fence.base_seq || writer_gang == fence.gang;
}

StatusOr<BackupManager::Fence> BackupManager::PrepareToWrite() const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    return Status::Error("creating backup directory " + dir_ + ": " + ec.message() +
                         " (is --backup-dir on a writable volume?)");
  }
  StatusOr<Fence> fence = ReadFence();
  if (!fence.ok()) return fence.status();
  TJ_RETURN_IF_ERROR(CheckNotFencedOut(*fence));
  return fence;
}

Status BackupManager::Claim() {
  if (identity_.gang < 0) return Status::Ok();
  std::error_code ec;
  StatusOr<Fence> fence = PrepareToWrite();
  if (!fence.ok()) return fence.status();
  if (fence->gang == identity_.gang) return Status::Ok();  // claimed by this gang already
  auto backups = ListBackups();
  if (!backups.ok()) return backups.status();
  // The base is the newest backup of this job's own (signed with its key): a file planted
  // there, or one no longer readable, is not progress that a later Restore must insist on.
  int64_t base = 0;
  for (const auto& [seq, path] : *backups) {  // newest first
    const bool after_last_claim = fence->gang >= 0 && seq > fence->base_seq;
    if (!after_last_claim && base > 0) break;  // older than a backup of the job's own
    StatusOr<TrainingState> state = ReadStateFile(path, identity_.job_key);
    if (!state.ok()) continue;  // it stays: Restore skips it with its reason
    if (after_last_claim && !Restorable(*fence, seq, GangOfState(*state))) {
      Warn("removing backup " + path + ": written by gang " + std::to_string(GangOfState(*state)) +
           "'s chief after gang " + std::to_string(fence->gang) +
           " claimed the directory (a stale chief)");
      fs::remove(path, ec);
      continue;
    }
    base = std::max(base, seq);
  }
  const nlohmann::json j = {{"gang", identity_.gang}, {"base_seq", base}};
  return WriteFileAtomically((fs::path(dir_) / kFenceName).string(), j.dump() + "\n", {}, writer_)
      .WithContext("claiming the backup directory for gang " + std::to_string(identity_.gang));
}

std::string BackupManager::FileName(int64_t seq) { return NumberedName(kPrefix, seq); }

std::optional<int64_t> BackupManager::ParseFileName(const std::string& name) {
  return ParseNumberedName(name, kPrefix);
}

void BackupManager::Warn(const std::string& message) {
  if (log_ != nullptr) {
    log_->Warn(message);
  } else {
    std::fprintf(stderr, "warning: %s\n", message.c_str());
  }
}

StatusOr<std::vector<std::pair<int64_t, std::string>>> BackupManager::ListBackups() const {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return out;
  if (!fs::is_directory(dir_, ec)) {
    return Status::Error("backup directory " + dir_ + " is not a directory");
  }
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (auto seq = ParseFileName(it->path().filename().string())) {
      out.emplace_back(*seq, it->path().string());
    }
  }
  if (ec) return Status::Error("listing backup directory " + dir_ + ": " + ec.message());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

Status BackupManager::Save(TrainingState state) {
  std::error_code ec;
  StatusOr<Fence> fence = PrepareToWrite();
  if (!fence.ok()) return fence.status();
  TJ_RETURN_IF_ERROR(RemoveTempFiles(dir_, [&](std::string_view writer) {
                       return writer == writer_;
                     }).WithContext("saving a backup"));
  auto backups = ListBackups();
  if (!backups.ok()) return backups.status();
  const int64_t next = backups->empty() ? 1 : backups->front().first + 1;
  const std::string path = (fs::path(dir_) / FileName(next)).string();
  if (identity_.gang >= 0) {
    if (!state.extra.is_object()) state.extra = nlohmann::json::object();
    state.extra[kGangField] = identity_.gang;
  }
  StatusOr<std::string> bytes = EncodeState(state, identity_.job_key);
  if (!bytes.ok()) return bytes.status().WithContext("saving backup " + path);
  TJ_RETURN_IF_ERROR(WriteFileAtomically(path, *bytes, "backup.before_rename", writer_)
                         .WithContext("saving backup"));

  // The new file is durable; now older ones may go (the newest kKeep stay).
  backups->insert(backups->begin(), {next, path});
  for (size_t i = kKeep; i < backups->size(); ++i) {
    fs::remove((*backups)[i].second, ec);
    if (ec) {
      Warn("could not remove old backup " + (*backups)[i].second + ": " + ec.message());
    }
  }
  return Status::Ok();
}

StatusOr<std::optional<TrainingState>> BackupManager::Restore(
    const nlohmann::json& expected_fingerprint, std::string* restored_path) {
  return Restore(
      [&](const nlohmann::json& found) -> std::optional<std::string> {
        auto diff = DescribeMismatch(expected_fingerprint, found);
        if (!diff) return std::nullopt;
        return "was written by a run with another configuration: " + *diff +
               ". Resume with the original configuration, or point --backup-dir at an empty "
               "directory to start over";
      },
      restored_path);
}

StatusOr<std::optional<TrainingState>> BackupManager::Restore(const FingerprintCheck& check,
                                                              std::string* restored_path) {
  StatusOr<Fence> fence = ReadFence();
  if (!fence.ok()) return fence.status();
  TJ_RETURN_IF_ERROR(CheckNotFencedOut(*fence));
  auto backups = ListBackups();
  if (!backups.ok()) return backups.status();
  if (backups->empty()) return std::optional<TrainingState>();

  std::string reasons;
  size_t fenced_out = 0, foreign = 0;
  for (const auto& [seq, path] : *backups) {
    StatusOr<TrainingState> state = ReadStateFile(path, identity_.job_key);
    if (!state.ok()) {
      if (state.status().code() == StatusCode::kPermissionDenied) ++foreign;
      Warn("skipping backup " + state.status().message() +
           (&path != &backups->back().second ? "; trying the previous backup" : ""));
      reasons += "\n  " + state.status().message();
      continue;
    }
    if (!Restorable(*fence, seq, GangOfState(*state))) {
      Warn("skipping backup " + path + ": written by gang " + std::to_string(GangOfState(*state)) +
           "'s chief after gang " + std::to_string(fence->gang) +
           " claimed the directory (a stale chief)");
      ++fenced_out;
      continue;
    }
    if (auto refusal = check(state->fingerprint)) {
      return Status::Error("backup " + path + " " + *refusal);
    }
    if (restored_path != nullptr) *restored_path = path;
    return std::optional<TrainingState>(std::move(state).value());
  }
  if (fenced_out == backups->size()) return std::optional<TrainingState>();
  if (foreign > 0 && foreign + fenced_out == backups->size()) {
    // Nothing here is this job's to resume, and nothing is torn or corrupt: a fresh start, said
    // loudly. The files stay until this run's own backups outnumber them.
    Warn("no backup in " + dir_ + " is signed with this job's key (" + std::to_string(foreign) +
         " under another key):" + reasons +
         "\nStarting afresh; if the job's rendezvous Secret was made again, the progress in "
         "those backups is lost");
    return std::optional<TrainingState>();
  }
  if (fence->gang >= 0 && fence->gang == identity_.gang && fence->base_seq == 0) {
    // This gang claimed a directory that held no backup of this job's own, so these files are
    // not its progress: planted, or debris of something else. A fresh start, said loudly; the
    // files stay until this run's own backups outnumber them.
    Warn("no backup in " + dir_ + " is this job's (none signed with its key was there when gang " +
         std::to_string(identity_.gang) + " claimed the directory); skipping " +
         std::to_string(backups->size()) + " unreadable file(s):" + reasons +
         "\nStarting afresh; remove them if they are in the way");
    return std::optional<TrainingState>();
  }
  return Status::Error("no valid backup in " + dir_ + " (" + std::to_string(backups->size()) +
                       " found, all unreadable):" + reasons +
                       "\nRefusing to start from scratch; remove the directory to start over");
}

Status BackupManager::Delete() {
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return Status::Ok();
  auto backups = ListBackups();
  if (!backups.ok()) return backups.status();
  for (const auto& [seq, path] : *backups) {
    fs::remove(path, ec);
    if (ec) return Status::Error("deleting backup " + path + ": " + ec.message());
  }
  fs::remove(fs::path(dir_) / kFenceName, ec);
  TJ_RETURN_IF_ERROR(RemoveTempFiles(dir_, [&](std::string_view writer) {
                       return writer == writer_;
                     }).WithContext("deleting backups"));
  if (!identity_.job_uid.empty()) fs::remove(dir_, ec);  // this job's own directory, when empty
  return Status::Ok();
}

}  // namespace tj::checkpoint
