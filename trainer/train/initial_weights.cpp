#include "trainer/train/initial_weights.h"

#include <fstream>

#include "common/sha256.h"
#include "trainer/model/keras_weights.h"

namespace tj::train {

Status LoadInitialWeights(const std::string& path, DeclaredModel* model) {
  const std::string context = "--initial-weights " + path;
  const model::Graph& graph = model->graph;
  const size_t max_bytes =
      (graph.parameter_count + graph.state_count) * sizeof(double) + kInitialWeightsSlackBytes;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::Error(context +
                         ": cannot open the file (give a Keras 3 .weights.h5 file of the model "
                         "--model-config declares: model.save_weights(\"x.weights.h5\"))");
  }
  std::string bytes;
  char chunk[65536];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    bytes.append(chunk, static_cast<size_t>(in.gcount()));
    if (bytes.size() > max_bytes) {
      return Status::Error(context + ": larger than the " + std::to_string(max_bytes >> 20) +
                           " MiB the weights of '" + graph.name + "' (" +
                           std::to_string(graph.parameter_count + graph.state_count) +
                           " floats) take in a .weights.h5 file: is it another model's?");
    }
  }
  if (in.bad()) return Status::Error(context + ": read error");
  StatusOr<model::KerasWeights> weights = model::DecodeKerasWeights(graph, bytes);
  if (!weights.ok()) return weights.status().WithContext(context);
  model->initial_params = std::move(weights->params);
  model->initial_state = std::move(weights->state);
  model->initial_weights_sha256 = ToHex(Sha256Of(bytes.data(), bytes.size()));
  return Status::Ok();
}

}  // namespace tj::train
