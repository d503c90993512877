// A declared model as tj-trainer trains it (--model-config FILE, TJ_MODEL_CONFIG): the layer
// graph read from Keras' model JSON (trainer/model/graph.h), its identity for backups,
// checkpoints and exports, and the checks against the dataset. The training loop, the
// evaluator and the export take it where they would take the built-in seeds' CNN; without
// --model-config none of this runs.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data/batch_prefetcher.h"
#include "trainer/data/dataset.h"
#include "trainer/model/graph.h"
#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/cpu_step.h"
#include "trainer/nn/thread_pool.h"

namespace tj::train {

// The largest model file read (Keras writes about 2 KB a layer).
inline constexpr size_t kMaxModelConfigBytes = size_t{16} << 20;

// The name of the model's state vector (BatchNormalization's moving statistics) in backups,
// checkpoints and exports, beside "weights"; absent when the model has no state.
inline constexpr char kModelStateTensor[] = "model_state";

struct DeclaredModel {
  std::string path;  // as given
  std::string text;  // the file as read: exported beside the weights as model.json
  // SHA-256 (hex) of the model JSON in canonical form (keys sorted, no whitespace, numbers
  // written back as nlohmann/json writes them): the same for the same file however it is
  // indented, another for any change of a layer, an option, a name or Keras' metadata.
  std::string sha256;
  model::Graph graph;
  // --initial-weights (initial_weights.h): the weights a fresh run starts from, and the
  // SHA-256 (hex) of their file, which joins the backups' fingerprint. Empty: none given.
  std::string initial_weights_sha256;
  std::vector<float> initial_params, initial_state;
};

// Reads and checks the model file: at most kMaxModelConfigBytes, nested at most 64 deep, a
// model model::ParseKerasModel accepts. Errors start with "--model-config PATH: ".
StatusOr<DeclaredModel> LoadDeclaredModel(const std::string& path);

// Ok when `model` takes the dataset's images (`shape`, or the same values as a flat vector)
// and predicts its `classes` classes, and its backups fit in a state file; else an error that
// names the model's shape, the dataset's (`source`, as ImageDataset::source() says) and what to
// change.
Status CheckModelFitsDataset(const DeclaredModel& model, data::ImageShape shape, int classes,
                             const std::string& source);

// The model's identity: {"name", "format": "keras", "model_sha256", "parameters", "state",
// "input", "classes"}. Part of every backup's fingerprint (name, model_sha256, parameters)
// and of architecture.json.
nlohmann::json DeclaredModelIdentity(const DeclaredModel& model);

// The model in inference mode (moving statistics, no Dropout) over every example of `eval`,
// read by a BatchPrefetcher with `prefetch`'s normalisation (no augmentation) in chunks of
// `max_rows`; the sums are those of one pass over the set in order, whatever max_rows. The
// loss is against targets smoothed by `label_smoothing` (CpuEngine::SetLabelSmoothing), as
// Keras reports a model's evaluation loss. An error when an example cannot be read.
StatusOr<nn::BatchStats> EvaluateDeclaredModel(
    const DeclaredModel& model, const std::vector<float>& params, const std::vector<float>& state,
    const data::ImageDataset& eval, const data::PrefetchOptions& prefetch, int max_rows,
    nn::ThreadPool* pool, const nn::cpu::Kernels& kernels, float label_smoothing = 0.0f);

}  // namespace tj::train
