#include "trainer/train/export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/json_nesting.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/checkpoint/state_file.h"
#include "trainer/checkpoint/volume_file.h"
#include "trainer/nn/model.h"

namespace tj::train {
namespace fs = std::filesystem;

namespace {
// An exported model is the job's product, read wherever its user takes it: integrity only.
constexpr std::string_view kExportKey;
// architecture.json as ExportModel writes it is under 2 KiB, nested 3 deep.
constexpr size_t kMaxArchBytes = 64 * 1024;
constexpr size_t kMaxArchNesting = 16;
}  // namespace

Status ExportModel(const std::string& dir, const std::vector<float>& weights, int epochs) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Error("creating export directory " + dir + ": " + ec.message());
  checkpoint::TrainingState state;
  state.fingerprint = nn::ArchitectureJson();
  state.epoch = epochs;
  state.tensors = {{"weights", weights}};
  TJ_RETURN_IF_ERROR(checkpoint::WriteStateFile(dir + "/weights.tjckpt", state, kExportKey));
  nlohmann::json arch = nn::ArchitectureJson();
  arch["epochs"] = epochs;
  arch["weights_file"] = "weights.tjckpt";
  arch["weights_sha256"] = nn::WeightsDigest(weights.data(), weights.size());
  return checkpoint::WriteFileAtomically(dir + "/architecture.json", arch.dump(2) + "\n");
}

StatusOr<std::vector<float>> LoadExportedModel(const std::string& dir) {
  const std::string arch_path = dir + "/architecture.json";
  StatusOr<std::optional<std::string>> text = checkpoint::ReadVolumeFile(arch_path, kMaxArchBytes);
  if (!text.ok()) return text.status().WithContext("reading model " + dir);
  if (!text->has_value()) {
    return Status::Error("reading model " + dir + ": " + arch_path +
                         " not found (pass --model with a directory written by --export-dir)");
  }
  const nlohmann::json arch = JsonNesting(**text) > kMaxArchNesting
                                  ? nlohmann::json(nlohmann::json::value_t::discarded)
                                  : nlohmann::json::parse(**text, nullptr, false);
  if (arch.is_discarded() || !arch.is_object()) {
    return Status::Error("reading " + arch_path + ": not valid JSON (or nested deeper than " +
                         std::to_string(kMaxArchNesting) +
                         "); pass --model with a directory written by --export-dir");
  }
  std::string weights_file;
  try {
    weights_file = arch.value("weights_file", "weights.tjckpt");
    if (arch.value("name", "") != nn::ArchitectureJson()["name"] ||
        arch.value("parameters", uint64_t{0}) != nn::Layout::kCount) {
      return Status::Error("reading " + arch_path + ": architecture " + arch.value("name", "?") +
                           " with " + std::to_string(arch.value("parameters", 0)) +
                           " parameters is not this trainer's model (seeds-cnn, 347146)");
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Error("reading " + arch_path + ": a field of the wrong type (" + e.what() +
                         "); pass --model with a directory written by --export-dir");
  }
  if (weights_file.empty() || weights_file.find('/') != std::string::npos || weights_file == "." ||
      weights_file == "..") {
    return Status::Error("reading " + arch_path + ": \"weights_file\" must name a file in " + dir +
                         ", not a path");
  }
  auto state = checkpoint::ReadStateFile(dir + "/" + weights_file, kExportKey);
  if (!state.ok()) return state.status().WithContext("reading model " + dir);
  const std::vector<float>* w = state->FindTensor("weights");
  if (w == nullptr || w->size() != nn::Layout::kCount) {
    return Status::Error("reading model " + dir +
                         ": the weights file lacks a tensor \"weights\" of " +
                         std::to_string(nn::Layout::kCount) + " floats");
  }
  return *w;
}

}  // namespace tj::train
