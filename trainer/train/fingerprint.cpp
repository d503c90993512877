#include "trainer/train/fingerprint.h"

#include "trainer/checkpoint/state_file.h"
#include "trainer/nn/model.h"
#include "trainer/train/recipe.h"

namespace tj::train {
namespace {

// The fields that say how the global batch is cut; compared by ResumeRefusal's own rule.
constexpr const char* kLayoutFields[] = {"workers", "elastic_shards", "global_batch"};

int64_t IntField(const nlohmann::json& fingerprint, const char* key) {
  const auto it = fingerprint.find(key);
  return it != fingerprint.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

bool Elastic(const nlohmann::json& fingerprint) {
  return fingerprint.is_object() && fingerprint.contains("elastic_shards");
}

int64_t Shards(const nlohmann::json& fingerprint) {
  return Elastic(fingerprint) ? IntField(fingerprint, "elastic_shards")
                              : IntField(fingerprint, "workers");
}

std::string Workers(int64_t n) { return std::to_string(n) + (n == 1 ? " worker" : " workers"); }

// "2 workers without elastic mode (global batch 128)", "4 elastic shards on 2 workers (global
// batch 256)".
std::string Describe(const nlohmann::json& fingerprint) {
  const int64_t workers = IntField(fingerprint, "workers");
  const int64_t global = Shards(fingerprint) * IntField(fingerprint, "batch_size");
  const std::string batch = " (global batch " + std::to_string(global) + ")";
  if (!Elastic(fingerprint)) return Workers(workers) + " without elastic mode" + batch;
  return std::to_string(Shards(fingerprint)) + " elastic shards on " + Workers(workers) + batch;
}

std::optional<std::string> LayoutRefusal(const nlohmann::json& run, const nlohmann::json& backup) {
  const int64_t shards = Shards(backup);
  if (Shards(run) == shards) return std::nullopt;
  const std::string was =
      "was written by " + Describe(backup) + " and this run has " + Describe(run) + ": ";
  const std::string elastic_flag = "--elastic-shards " + std::to_string(shards) +
                                   " (or TJ_ELASTIC_SHARDS=" + std::to_string(shards) + ")";
  const std::string start_over = "; or point --backup-dir at an empty directory to start over";
  if (Elastic(run)) {
    return was +
           "the shard count fixes the global batch and the order of the gradient sums, so it "
           "cannot change within a run. Resume with " +
           elastic_flag + " at any worker count that divides " + std::to_string(shards) +
           start_over;
  }
  if (Elastic(backup)) {
    return was +
           "without elastic mode a run resumes only at as many workers as the backup has "
           "shards. Resume in elastic mode with " +
           elastic_flag + " at any worker count that divides " + std::to_string(shards) +
           ", or with " + std::to_string(shards) + " workers" + start_over;
  }
  return was +
         "without elastic mode a backup resumes only at the worker count that wrote it (the "
         "global batch and the order of the gradient sums change with the worker count). Run " +
         std::to_string(shards) + " workers, or resume in elastic mode with " + elastic_flag +
         " at any worker count that divides " + std::to_string(shards) + start_over +
         ". A job whose worker count may change trains in elastic mode from its start";
}

nlohmann::json WithoutLayout(nlohmann::json fingerprint) {
  if (!fingerprint.is_object()) return fingerprint;
  for (const char* key : kLayoutFields) fingerprint.erase(key);
  return fingerprint;
}

}  // namespace

nlohmann::json TrainingFingerprint(const Options& options, int replicas,
                                   const data::Dataset& dataset, const DeclaredModel* model) {
  return TrainingFingerprint(options, replicas, nlohmann::json{{"dataset_sha256", dataset.digest}},
                             model);
}

nlohmann::json TrainingFingerprint(const Options& options, int replicas,
                                   const nlohmann::json& dataset, const DeclaredModel* model) {
  nlohmann::json f = {{"model", nn::ArchitectureJson()["name"]},
                      {"parameters", nn::Layout::kCount},
                      {"batch_size", options.batch_size},
                      {"workers", replicas},
                      {"steps_per_epoch_cap", options.steps_per_epoch},
                      {"seed", options.seed}};
  f.update(dataset);
  if (model != nullptr) {
    f["model"] = model->graph.name;
    f["model_sha256"] = model->sha256;
    f["parameters"] = model->graph.parameter_count;
    if (!model->initial_weights_sha256.empty())
      f["initial_weights_sha256"] = model->initial_weights_sha256;
    f.update(RecipeFingerprint(options.recipe));
  }
  if (options.elastic_shards > 0) {
    f["elastic_shards"] = options.elastic_shards;
    f["global_batch"] = int64_t{options.elastic_shards} * options.batch_size;
  }
  return f;
}

std::optional<std::string> ResumeRefusal(const nlohmann::json& run, const nlohmann::json& backup) {
  std::string refusal;
  if (auto diff = checkpoint::DescribeMismatch(WithoutLayout(run), WithoutLayout(backup))) {
    refusal = "was written by a run with another configuration: " + *diff +
              ". Resume with the original configuration, or point --backup-dir at an empty "
              "directory to start over";
  }
  if (auto layout = LayoutRefusal(run, backup)) {
    refusal += (refusal.empty() ? "" : "; and it ") + *layout;
  }
  if (refusal.empty()) return std::nullopt;
  return refusal;
}

}  // namespace tj::train
