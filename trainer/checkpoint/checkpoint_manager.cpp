#include "trainer/checkpoint/checkpoint_manager.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "common/json_nesting.h"
#include "common/sha256.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/checkpoint/numbered_name.h"
#include "trainer/checkpoint/volume_file.h"

namespace tj::checkpoint {
namespace fs = std::filesystem;

namespace {
constexpr std::string_view kPrefix = "ckpt-";
constexpr size_t kMaxFinalMarkerBytes = 4096;  // the marker tj-trainer writes is under 160
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

std::string FinalMarkerText(int64_t final_epoch) {
  return "tj-trainer final marker: " + CheckpointName(final_epoch);
}

StatusOr<std::optional<int64_t>> ReadFinalMarker(const std::string& dir, std::string_view key) {
  const std::string path = (fs::path(dir) / kFinalMarkerName).string();
  StatusOr<std::optional<std::string>> text = ReadVolumeFile(path, kMaxFinalMarkerBytes);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return std::optional<int64_t>();
  const nlohmann::json j = JsonNesting(**text) > 1
                               ? nlohmann::json(nlohmann::json::value_t::discarded)
                               : nlohmann::json::parse(**text, nullptr, false);
  if (!j.is_object() || !j.contains("final_epoch") || !j["final_epoch"].is_number_integer() ||
      !j.contains("hmac") || !j["hmac"].is_string()) {
    return Status::Error(path +
                         ": not a final marker ({\"final_epoch\": N, ..., \"hmac\": \"...\"}): "
                         "planted, or written by a tj-trainer before markers were signed; remove "
                         "it if no training of this job has ended");
  }
  const int64_t final_epoch = j["final_epoch"].get<int64_t>();
  const std::string signed_text = FinalMarkerText(final_epoch);
  StatusOr<Digest> mac = VolumeMac(key, signed_text.data(), signed_text.size());
  if (!mac.ok()) return mac.status().WithContext(path);
  const std::string expected = ToHex(*mac);
  const std::string& found = j["hmac"].get_ref<const std::string&>();
  if (found.size() != expected.size() ||
      CRYPTO_memcmp(found.data(), expected.data(), expected.size()) != 0) {
    return Status::Error(StatusCode::kPermissionDenied,
                         path +
                             ": not signed with this job's key (TJ_RENDEZVOUS_KEY): planted on "
                             "the shared volume, or another job's; it is not believed. Remove it");
  }
  return std::optional<int64_t>(final_epoch);
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
  const std::string signed_text = FinalMarkerText(final_epoch);
  StatusOr<Digest> mac = VolumeMac(key_, signed_text.data(), signed_text.size());
  if (!mac.ok()) return mac.status().WithContext("signing the final marker in " + dir_);
  const nlohmann::json marker = {{"final_epoch", final_epoch},
                                 {"checkpoint", CheckpointName(final_epoch)},
                                 {"hmac", ToHex(*mac)}};
  return WriteFileAtomically((fs::path(dir_) / kFinalMarkerName).string(), marker.dump() + "\n");
}

Status CheckpointManager::ClearFinalMarker() {
  std::error_code ec;
  fs::remove(fs::path(dir_) / kFinalMarkerName, ec);
  if (ec) return Status::Error("removing " + dir_ + "/" + kFinalMarkerName + ": " + ec.message());
  return Status::Ok();
}

}  // namespace tj::checkpoint
