#include "trainer/train/declared_model.h"

#include <algorithm>
#include <fstream>
#include <numeric>

#include "common/json_nesting.h"
#include "common/sha256.h"
#include "trainer/checkpoint/state_file.h"
#include "trainer/model/cpu_engine.h"

namespace tj::train {
namespace {

// Keras' model JSON nests about 8 deep; more is not a model.
constexpr size_t kMaxModelNesting = 64;

std::string Context(const std::string& path) { return "--model-config " + path; }

}  // namespace

StatusOr<DeclaredModel> LoadDeclaredModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::Error(Context(path) +
                         ": cannot open the file (give the path of a Keras model's JSON, "
                         "model.to_json())");
  }
  DeclaredModel m;
  m.path = path;
  char chunk[65536];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    m.text.append(chunk, static_cast<size_t>(in.gcount()));
    if (m.text.size() > kMaxModelConfigBytes) {
      return Status::Error(Context(path) + ": larger than " +
                           std::to_string(kMaxModelConfigBytes >> 20) +
                           " MiB, which no Keras model JSON of the supported layers needs");
    }
  }
  if (in.bad()) return Status::Error(Context(path) + ": read error");
  if (JsonNesting(m.text) > kMaxModelNesting) {
    return Status::Error(Context(path) + ": nested deeper than " +
                         std::to_string(kMaxModelNesting) + ", which is no Keras model JSON");
  }
  StatusOr<model::Graph> graph = model::ParseKerasModel(m.text);
  if (!graph.ok()) return graph.status().WithContext(Context(path));
  m.graph = std::move(*graph);
  // Parsed once more for the canonical form: ParseKerasModel accepted it, so it is JSON.
  const std::string canonical = nlohmann::json::parse(m.text, nullptr, false).dump();
  m.sha256 = ToHex(Sha256Of(canonical.data(), canonical.size()));
  return m;
}

Status CheckModelFitsDataset(const DeclaredModel& model, data::ImageShape shape, int classes,
                             const std::string& source) {
  const model::Graph& g = model.graph;
  const model::Shape& input = g.input_shape();
  // "(28, 28, 1)" or "(784,)" as Keras prints shapes.
  const model::Shape image{shape.height, shape.width, shape.channels, false};
  const model::Shape flat{1, 1, static_cast<int>(shape.Size()), true};
  std::string problems;
  if (!(input == image) && !(input == flat)) {
    problems = "the model's input is " + input.ToString() + " and the dataset's images are " +
               image.ToString() + " (" + source + "): declare the model's input as " +
               "keras.Input(shape=" + image.ToString() + "), or " + flat.ToString() +
               " for flat vectors; or train on images of the model's shape (--dataset-format, " +
               "--train-data, --image-size HxW, --image-channels)";
  }
  const model::Shape& output = g.layers[g.output].out;
  if (output.size() != static_cast<size_t>(classes) || !output.flat) {
    const model::Shape want{1, 1, classes, true};
    problems += std::string(problems.empty() ? "" : "; and ") + "the model's output is " +
                output.ToString() + " and the dataset has " + std::to_string(classes) +
                " classes (labels 0-" + std::to_string(classes - 1) +
                "), which need an output of " + want.ToString() + ": end the model with Dense(" +
                std::to_string(classes) + ") (softmax, or no activation for logits)";
  }
  if (!problems.empty()) return Status::Error(Context(model.path) + ": " + problems);
  // A backup holds the weights, Adam's two moments and the state.
  const size_t floats = 3 * g.parameter_count + g.state_count;
  if (floats * sizeof(float) + checkpoint::kMaxStateHeaderBytes > checkpoint::kMaxStateFileBytes) {
    return Status::Error(
        Context(model.path) + ": the model has " + std::to_string(g.parameter_count) +
        " parameters, and its backups (the weights and Adam's two moments, 12 bytes a "
        "parameter) would be larger than the " +
        std::to_string(checkpoint::kMaxStateFileBytes >> 20) +
        " MiB a state file may hold: declare a model of at most about " +
        std::to_string((checkpoint::kMaxStateFileBytes - checkpoint::kMaxStateHeaderBytes) / 12 /
                       1000) +
        " thousand parameters");
  }
  return Status::Ok();
}

nlohmann::json DeclaredModelIdentity(const DeclaredModel& model) {
  const model::Graph& g = model.graph;
  const model::Shape& in = g.input_shape();
  nlohmann::json input =
      in.flat ? nlohmann::json::array({in.c}) : nlohmann::json::array({in.h, in.w, in.c});
  return {{"name", g.name},
          {"format", "keras"},
          {"model_sha256", model.sha256},
          {"parameters", g.parameter_count},
          {"state", g.state_count},
          {"input", input},
          {"classes", g.classes()}};
}

StatusOr<nn::BatchStats> EvaluateDeclaredModel(
    const DeclaredModel& model, const std::vector<float>& params, const std::vector<float>& state,
    const data::ImageDataset& eval, const data::PrefetchOptions& prefetch, int max_rows,
    nn::ThreadPool* pool, const nn::cpu::Kernels& kernels, float label_smoothing) {
  data::PrefetchOptions options = prefetch;
  options.augment = {};
  auto prefetcher = data::BatchPrefetcher::Create(eval, options);
  if (!prefetcher.ok()) return prefetcher.status().WithContext(eval.source());
  const int count = eval.size();
  // Two chunks queued ahead of the one evaluated.
  int queued_to = 0;
  auto queue_next = [&] {
    if (queued_to >= count) return;
    data::BatchRequest request{.epoch = 0, .indices = {}, .augment = false};
    const int end = std::min(count, queued_to + max_rows);
    for (int i = queued_to; i < end; ++i) request.indices.push_back(i);
    (*prefetcher)->Submit(std::move(request));
    queued_to = end;
  };
  queue_next();
  queue_next();
  std::vector<uint32_t> rows(static_cast<size_t>(max_rows));
  std::iota(rows.begin(), rows.end(), 0u);
  model::CpuEngine engine(model.graph, max_rows, pool, kernels);
  engine.SetLabelSmoothing(label_smoothing);
  nn::BatchStats sums;
  for (int done = 0; done < count;) {
    StatusOr<data::Batch> batch = (*prefetcher)->Next();
    if (!batch.ok()) return batch.status().WithContext("evaluating on " + eval.source());
    queue_next();
    sums = engine.Evaluate(params.data(), state.data(),
                           {batch->images.data(), batch->labels.data(), rows.data(), batch->count},
                           sums);
    done += batch->count;
  }
  return sums;
}

}  // namespace tj::train
