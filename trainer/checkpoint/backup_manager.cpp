#include "trainer/checkpoint/backup_manager.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "trainer/checkpoint/atomic_file.h"

namespace tj::checkpoint {
namespace fs = std::filesystem;

namespace {
constexpr std::string_view kPrefix = "backup-";
constexpr size_t kKeep = 2;  // the newest and the one before it
}  // namespace

BackupManager::BackupManager(std::string dir, EventLog* log) : dir_(std::move(dir)), log_(log) {}

std::string BackupManager::FileName(int64_t seq) {
  return std::string(kPrefix) + std::to_string(seq);
}

std::optional<int64_t> BackupManager::ParseFileName(const std::string& name) {
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size();
  if (*first < '0' || *first > '9') return std::nullopt;
  int64_t seq = 0;
  auto [ptr, ec] = std::from_chars(first, last, seq);
  if (ec != std::errc() || ptr != last || seq < 0) return std::nullopt;
  return seq;
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

Status BackupManager::Save(const TrainingState& state) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    return Status::Error("creating backup directory " + dir_ + ": " + ec.message() +
                         " (is --backup-dir on a writable volume?)");
  }
  TJ_RETURN_IF_ERROR(RemoveTempFiles(dir_).WithContext("saving a backup"));
  auto backups = ListBackups();
  if (!backups.ok()) return backups.status();
  const int64_t next = backups->empty() ? 1 : backups->front().first + 1;
  const std::string path = (fs::path(dir_) / FileName(next)).string();
  TJ_RETURN_IF_ERROR(
      WriteStateFile(path, state, "backup.before_rename").WithContext("saving backup"));

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
  auto backups = ListBackups();
  if (!backups.ok()) return backups.status();
  if (backups->empty()) return std::optional<TrainingState>();

  std::string reasons;
  for (const auto& [seq, path] : *backups) {
    StatusOr<TrainingState> state = ReadStateFile(path);
    if (!state.ok()) {
      Warn("skipping backup " + state.status().message() +
           (&path != &backups->back().second ? "; trying the previous backup" : ""));
      reasons += "\n  " + state.status().message();
      continue;
    }
    if (auto diff = DescribeMismatch(expected_fingerprint, state->fingerprint)) {
      return Status::Error("backup " + path +
                           " was written by a run with another configuration: " + *diff +
                           ". Resume with the original configuration, or point --backup-dir at "
                           "an empty directory to start over");
    }
    if (restored_path != nullptr) *restored_path = path;
    return std::optional<TrainingState>(std::move(state).value());
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
  return RemoveTempFiles(dir_).WithContext("deleting backups");
}

}  // namespace tj::checkpoint
