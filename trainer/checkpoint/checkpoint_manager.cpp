#include "trainer/checkpoint/checkpoint_manager.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "trainer/checkpoint/atomic_file.h"
#include "trainer/checkpoint/numbered_name.h"

namespace tj::checkpoint {
namespace fs = std::filesystem;

namespace {
constexpr std::string_view kPrefix = "ckpt-";
}  // namespace

std::string CheckpointName(int64_t epoch) { return NumberedName(kPrefix, epoch); }

std::optional<int64_t> ParseCheckpointName(const std::string& name) {
  return ParseNumberedName(name, kPrefix);
}

StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(const std::string& dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (auto epoch = ParseCheckpointName(name)) {
      out.push_back({*epoch, name, it->path().string()});
    }
  }
  if (ec) return Status::Error("listing checkpoint directory " + dir + ": " + ec.message());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.epoch < b.epoch; });
  return out;
}

StatusOr<std::optional<int64_t>> ReadFinalMarker(const std::string& dir) {
  const std::string path = (fs::path(dir) / kFinalMarkerName).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<int64_t>();
  std::ifstream in(path);
  if (!in) return Status::Error(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    return std::optional<int64_t>(j.at("final_epoch").get<int64_t>());
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(path + ": malformed final marker: " + e.what());
  }
}

CheckpointManager::CheckpointManager(std::string dir, int keep, std::string key)
    : dir_(std::move(dir)), keep_(keep), key_(std::move(key)) {}

StatusOr<std::string> CheckpointManager::Save(const TrainingState& state) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    return Status::Error("creating checkpoint directory " + dir_ + ": " + ec.message() +
                         " (is --checkpoint-dir on a writable volume?)");
  }
  TJ_RETURN_IF_ERROR(RemoveTempFiles(dir_).WithContext("saving a checkpoint"));
  const std::string path = (fs::path(dir_) / CheckpointName(state.epoch)).string();
  TJ_RETURN_IF_ERROR(WriteStateFile(path, state, key_).WithContext("saving checkpoint"));
  if (keep_ > 0) {
    auto all = ListCheckpoints(dir_);
    if (!all.ok()) return all.status();
    const size_t keep = static_cast<size_t>(keep_);
    for (size_t i = 0; i + keep < all->size(); ++i) {
      fs::remove((*all)[i].path, ec);
      if (ec)
        return Status::Error("removing old checkpoint " + (*all)[i].path + ": " + ec.message());
    }
  }
  return path;
}

Status CheckpointManager::WriteFinalMarker(int64_t final_epoch) {
  const nlohmann::json marker = {{"final_epoch", final_epoch},
                                 {"checkpoint", CheckpointName(final_epoch)}};
  return WriteFileAtomically((fs::path(dir_) / kFinalMarkerName).string(), marker.dump() + "\n");
}

Status CheckpointManager::ClearFinalMarker() {
  std::error_code ec;
  fs::remove(fs::path(dir_) / kFinalMarkerName, ec);
  if (ec) return Status::Error("removing " + dir_ + "/" + kFinalMarkerName + ": " + ec.message());
  return Status::Ok();
}

}  // namespace tj::checkpoint
