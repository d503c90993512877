#include "trainer/train/export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/json_nesting.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/checkpoint/state_file.h"
#include "trainer/checkpoint/volume_file.h"
#include "trainer/model/keras_weights.h"
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

namespace {

// An export's architecture.json, checked as a file and as JSON, and the name of its weights
// file; what it describes is the caller's to check.
struct Architecture {
  nlohmann::json arch;
  std::string arch_path;
  std::string weights_file;
};

StatusOr<Architecture> ReadArchitecture(const std::string& dir) {
  Architecture out;
  out.arch_path = dir + "/architecture.json";
  const std::string& arch_path = out.arch_path;
  StatusOr<std::optional<std::string>> text = checkpoint::ReadVolumeFile(arch_path, kMaxArchBytes);
  if (!text.ok()) return text.status().WithContext("reading model " + dir);
  if (!text->has_value()) {
    return Status::Error("reading model " + dir + ": " + arch_path +
                         " not found (pass --model with a directory written by --export-dir)");
  }
  out.arch = JsonNesting(**text) > kMaxArchNesting
                 ? nlohmann::json(nlohmann::json::value_t::discarded)
                 : nlohmann::json::parse(**text, nullptr, false);
  const nlohmann::json& arch = out.arch;
  if (arch.is_discarded() || !arch.is_object()) {
    return Status::Error("reading " + arch_path + ": not valid JSON (or nested deeper than " +
                         std::to_string(kMaxArchNesting) +
                         "); pass --model with a directory written by --export-dir");
  }
  std::string& weights_file = out.weights_file;
  try {
    weights_file = arch.value("weights_file", "weights.tjckpt");
  } catch (const nlohmann::json::exception& e) {
    return Status::Error("reading " + arch_path + ": a field of the wrong type (" + e.what() +
                         "); pass --model with a directory written by --export-dir");
  }
  if (weights_file.empty() || weights_file.find('/') != std::string::npos || weights_file == "." ||
      weights_file == "..") {
    return Status::Error("reading " + arch_path + ": \"weights_file\" must name a file in " + dir +
                         ", not a path");
  }
  return out;
}

StatusOr<checkpoint::TrainingState> ReadWeights(const std::string& dir, const Architecture& a) {
  auto state = checkpoint::ReadStateFile(dir + "/" + a.weights_file, kExportKey);
  if (!state.ok()) return state.status().WithContext("reading model " + dir);
  return state;
}

// The declared model an architecture.json describes ("name" and "model_sha256"), or "" when it
// describes the built-in one.
std::string DeclaredIn(const nlohmann::json& arch) {
  const auto sha = arch.find("model_sha256");
  if (sha == arch.end() || !sha->is_string()) return "";
  const auto name = arch.find("name");
  return "the declared model '" +
         (name != arch.end() && name->is_string() ? name->get<std::string>() : "?") +
         "' (model_sha256 " + sha->get<std::string>() + ")";
}

}  // namespace

StatusOr<std::vector<float>> LoadExportedModel(const std::string& dir) {
  StatusOr<Architecture> read = ReadArchitecture(dir);
  if (!read.ok()) return read.status();
  const nlohmann::json& arch = read->arch;
  const std::string& arch_path = read->arch_path;
  if (const std::string declared = DeclaredIn(arch); !declared.empty()) {
    return Status::Error("reading " + arch_path + ": " + declared +
                         ", not the built-in seeds-cnn: evaluate it with --model-config " + dir +
                         "/model.json (the model it was trained as)");
  }
  try {
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
  auto state = ReadWeights(dir, *read);
  if (!state.ok()) return state.status();
  const std::vector<float>* w = state->FindTensor("weights");
  if (w == nullptr || w->size() != nn::Layout::kCount) {
    return Status::Error("reading model " + dir +
                         ": the weights file lacks a tensor \"weights\" of " +
                         std::to_string(nn::Layout::kCount) + " floats");
  }
  return *w;
}

Status ExportDeclaredModel(const std::string& dir, const DeclaredModel& model,
                           const std::vector<float>& weights, const std::vector<float>& state,
                           int epochs) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Error("creating export directory " + dir + ": " + ec.message());
  nlohmann::json arch = DeclaredModelIdentity(model);
  checkpoint::TrainingState file;
  file.fingerprint = arch;
  file.epoch = epochs;
  file.tensors = {{"weights", weights}};
  if (!state.empty()) file.tensors.emplace_back(kModelStateTensor, state);
  TJ_RETURN_IF_ERROR(checkpoint::WriteStateFile(dir + "/weights.tjckpt", file, kExportKey));
  TJ_RETURN_IF_ERROR(checkpoint::WriteFileAtomically(dir + "/model.json", model.text));
  // The same weights as Keras 3's model.save_weights writes them, for model.load_weights.
  const std::vector<float> no_state(model.graph.state_count, 0.0f);
  StatusOr<std::string> keras =
      model::EncodeKerasWeights(model.graph, weights, state.empty() ? no_state : state);
  if (!keras.ok()) return keras.status().WithContext("writing " + dir + "/" + kKerasWeightsFile);
  TJ_RETURN_IF_ERROR(checkpoint::WriteFileAtomically(dir + "/" + kKerasWeightsFile, *keras));
  arch["keras_weights_file"] = kKerasWeightsFile;
  arch["model_config"] = "model.json";
  arch["epochs"] = epochs;
  arch["weights_file"] = "weights.tjckpt";
  arch["weights_sha256"] = nn::WeightsDigest(weights.data(), weights.size());
  return checkpoint::WriteFileAtomically(dir + "/architecture.json", arch.dump(2) + "\n");
}

StatusOr<DeclaredWeights> LoadExportedDeclaredModel(const std::string& dir,
                                                    const DeclaredModel& model) {
  StatusOr<Architecture> read = ReadArchitecture(dir);
  if (!read.ok()) return read.status();
  const std::string declared = DeclaredIn(read->arch);
  if (declared.empty()) {
    return Status::Error("reading " + read->arch_path +
                         ": the built-in seeds-cnn, not the declared model of --model-config " +
                         model.path + ": evaluate it without --model-config");
  }
  if (read->arch["model_sha256"] != model.sha256) {
    return Status::Error("reading " + read->arch_path + ": " + declared + ", and --model-config " +
                         model.path + " is '" + model.graph.name + "' (model_sha256 " +
                         model.sha256 + "): evaluate it with --model-config " + dir +
                         "/model.json, the model it was trained as");
  }
  auto file = ReadWeights(dir, *read);
  if (!file.ok()) return file.status();
  DeclaredWeights out;
  const std::vector<float>* w = file->FindTensor("weights");
  const std::vector<float>* s = file->FindTensor(kModelStateTensor);
  const size_t states = model.graph.state_count;
  if (w == nullptr || w->size() != model.graph.parameter_count ||
      (states > 0 && (s == nullptr || s->size() != states))) {
    return Status::Error(
        "reading model " + dir + ": the weights file lacks a tensor \"weights\" of " +
        std::to_string(model.graph.parameter_count) + " floats" +
        (states > 0 ? " or \"" + std::string(kModelStateTensor) + "\" of " + std::to_string(states)
                    : std::string()));
  }
  out.weights = *w;
  if (states > 0) out.state = *s;
  return out;
}

}  // namespace tj::train
