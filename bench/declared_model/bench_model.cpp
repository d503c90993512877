// tj-bench-model: times the declared-model engine's training step (forward, loss, backward)
// on random images, and the built-in model's step (trainer/nn/cpu_step.h) for comparison.
// Prints the median step time over --steps steps (after one warm-up step), images per second,
// and each layer's forward and backward milliseconds per step.
//
//   tj-bench-model MODEL.json [--batch 64] [--threads 1] [--steps 20] [--no-fuse]
//                  [--target auto|avx512|avx2|sse4|neon|scalar]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/random.h"
#include "trainer/model/cpu_engine.h"
#include "trainer/model/graph.h"
#include "trainer/nn/cpu_step.h"
#include "trainer/nn/model.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

template <typename Step>
double MedianStepMs(int steps, const Step& step) {
  step();  // warm-up: page in the buffers
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  return Median(ms);
}

int Usage() {
  std::fprintf(stderr,
               "usage: tj-bench-model MODEL.json [--batch N] [--threads N] [--steps N] "
               "[--no-fuse] [--target NAME]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string path = argv[1];
  int batch = 64, threads = 1, steps = 20;
  bool fuse = true;
  std::string target = "auto";
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--batch" && has_value) {
      batch = std::atoi(argv[++i]);
    } else if (a == "--threads" && has_value) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--steps" && has_value) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--target" && has_value) {
      target = argv[++i];
    } else if (a == "--no-fuse") {
      fuse = false;
    } else {
      return Usage();
    }
  }
  if (batch < 1 || threads < 1 || steps < 1) return Usage();
  tj::StatusOr<tj::model::Graph> graph = tj::model::LoadKerasModel(path);
  if (!graph.ok()) {
    std::fprintf(stderr, "%s\n", graph.status().message().c_str());
    return 1;
  }
  tj::StatusOr<const tj::nn::cpu::Kernels*> kernels = tj::nn::cpu::KernelsFor(target);
  if (!kernels.ok()) {
    std::fprintf(stderr, "%s\n", kernels.status().message().c_str());
    return 2;
  }
  const tj::model::Graph& g = *graph;
  std::vector<float> params = tj::model::InitialParameters(g, 1),
                     state = tj::model::InitialState(g);
  std::vector<float> grad(g.parameter_count);
  tj::SplitMix64 rng(2);
  std::vector<float> images(static_cast<size_t>(batch) * g.input_shape().size());
  for (float& x : images) x = rng.NextFloat();
  std::vector<int32_t> labels;
  std::vector<uint32_t> index;
  for (int r = 0; r < batch; ++r) {
    labels.push_back(static_cast<int32_t>(rng.Below(g.classes())));
    index.push_back(r);
  }
  const tj::model::Batch b{images.data(), labels.data(), index.data(), batch};
  tj::nn::ThreadPool pool(threads);
  tj::model::CpuEngine engine(g, batch, &pool, **kernels, fuse);
  engine.ComputeGradients(params.data(), state.data(), b, 1.0f / batch, grad.data());
  engine.ResetTimes();
  const double ms = MedianStepMs(steps, [&] {
    engine.ComputeGradients(params.data(), state.data(), b, 1.0f / batch, grad.data());
  });
  std::printf("%s: %zu parameters, batch %d, %d thread(s), target %s%s\n", g.name.c_str(),
              g.parameter_count, batch, threads, (*kernels)->target,
              engine.fused() ? ", seeds' conv+pool fused" : "");
  std::printf("declared model: %.2f ms a step (median of %d), %.0f images/s\n", ms, steps,
              batch * 1000.0 / ms);
  const double runs = steps + 1;
  std::printf("  %-20s %-22s %10s %10s\n", "layer", "class", "fwd ms", "bwd ms");
  for (int i : g.order) {
    const tj::model::Layer& l = g.layers[i];
    std::printf("  %-20s %-22s %10.3f %10.3f\n", l.name.c_str(), l.keras_class.c_str(),
                1000.0 * engine.times().forward[i] / runs,
                1000.0 * engine.times().backward[i] / runs);
  }
  if (g.input_shape() == tj::model::Shape{28, 28, 1, false} && g.classes() == 10) {
    std::vector<float> builtin = tj::nn::InitialParameters(1), builtin_grad(tj::nn::Layout::kCount);
    const std::vector<uint8_t> narrow(labels.begin(), labels.end());  // the built-in's labels
    const tj::nn::Batch nb{images.data(), narrow.data(), index.data(), batch};
    tj::nn::CpuStep step(batch, &pool, **kernels);
    const double builtin_ms = MedianStepMs(steps, [&] {
      step.ComputeGradients(builtin.data(), nb, 1.0f / batch, builtin_grad.data());
    });
    std::printf("built-in model (the seeds' CNN): %.2f ms a step, %.0f images/s\n", builtin_ms,
                batch * 1000.0 / builtin_ms);
  }
  return 0;
}
