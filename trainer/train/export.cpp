#include "trainer/train/export.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trainer/checkpoint/atomic_file.h"
#include "trainer/checkpoint/state_file.h"
#include "trainer/nn/model.h"

namespace tj::train {
namespace fs = std::filesystem;

namespace {
// An exported model is the job's product, read wherever its user takes it: integrity only.
constexpr std::string_view kExportKey;
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
  std::ifstream in(arch_path);
  if (!in) {
    return Status::Error("reading model " + dir + ": " + arch_path +
                         " not found (pass --model with a directory written by --export-dir)");
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json arch = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (arch.is_discarded() || !arch.is_object()) {
    return Status::Error("reading " + arch_path + ": not valid JSON");
  }
  if (arch.value("name", "") != nn::ArchitectureJson()["name"] ||
      arch.value("parameters", uint64_t{0}) != nn::Layout::kCount) {
    return Status::Error("reading " + arch_path + ": architecture " + arch.value("name", "?") +
                         " with " + std::to_string(arch.value("parameters", 0)) +
                         " parameters is not this trainer's model (seeds-cnn, 347146)");
  }
  auto state = checkpoint::ReadStateFile(dir + "/" + arch.value("weights_file", "weights.tjckpt"),
                                         kExportKey);
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
