// The declared-model engine's logits for a Keras model's weights, for keras_weights.py to
// compare with Keras' predictions: loads MODEL.json and WEIGHTS.weights.h5
// (trainer/model/keras_weights.h), evaluates N images of IMAGES (raw float32, NHWC) in
// inference mode, writes N x classes float32 logits to OUT. Exit 1 with the error otherwise.
// Usage: keras_weights_eval MODEL.json WEIGHTS.weights.h5 IMAGES N OUT
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "trainer/model/cpu_engine.h"
#include "trainer/model/keras_weights.h"
#include "trainer/nn/thread_pool.h"

namespace {

constexpr int kChunk = 500;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int Fail(const std::string& message) {
  std::cerr << "keras_weights_eval: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6)
    return Fail("usage: keras_weights_eval MODEL.json WEIGHTS.weights.h5 IMAGES N OUT");
  using tj::model::Graph;
  tj::StatusOr<Graph> graph = tj::model::LoadKerasModel(argv[1]);
  if (!graph.ok()) return Fail(graph.status().message());
  auto weights = tj::model::DecodeKerasWeights(*graph, ReadAll(argv[2]));
  if (!weights.ok()) return Fail(weights.status().message());
  const int n = std::stoi(argv[4]);
  const size_t in_size = graph->input_shape().size();
  const std::string images_bytes = ReadAll(argv[3]);
  if (images_bytes.size() != static_cast<size_t>(n) * in_size * sizeof(float)) {
    return Fail(std::string(argv[3]) + " does not hold " + std::to_string(n) + " images");
  }
  std::vector<float> images(static_cast<size_t>(n) * in_size);
  std::copy_n(images_bytes.data(), images_bytes.size(), reinterpret_cast<char*>(images.data()));
  std::vector<int32_t> labels(static_cast<size_t>(n), 0);
  tj::nn::ThreadPool pool(1);
  tj::model::CpuEngine engine(*graph, kChunk, &pool);
  const int classes = graph->classes();
  std::vector<float> logits;
  std::vector<uint32_t> index(kChunk);
  for (int first = 0; first < n; first += kChunk) {
    const int rows = std::min(kChunk, n - first);
    for (int r = 0; r < rows; ++r) index[r] = static_cast<uint32_t>(first + r);
    engine.Evaluate(weights->params.data(), weights->state.data(),
                    {images.data(), labels.data(), index.data(), rows});
    const float* out = engine.Output(graph->output);
    logits.insert(logits.end(), out, out + static_cast<size_t>(rows) * classes);
  }
  std::ofstream out(argv[5], std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(float)));
  return out ? 0 : Fail(std::string("writing ") + argv[5]);
}
