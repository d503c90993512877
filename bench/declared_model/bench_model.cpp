// tj-bench-model: times the declared-model engine's training step (forward, loss, backward)
// on random images, and the built-in model's step (trainer/nn/cpu_step.h) for comparison.
// Prints the median step time over --steps steps (after one warm-up step), images per second,
// each layer's forward and backward milliseconds per step and, for the layers with weights
// (Conv2D, DepthwiseConv2D, Dense), the GFLOP/s they achieved (a multiply-add counted as 2
// floating-point operations; backward: the kernel's gradient and, unless the layer reads the
// input image, the input's). --peak first measures this CPU core's float32 multiply-add
// throughput (AVX-512, 16 independent accumulators; not measured without AVX-512) to compare
// against.
//
//   tj-bench-model MODEL.json [--batch 64] [--threads 1] [--steps 20] [--no-fuse] [--peak]
//                  [--target auto|avx512|avx2|sse4|neon|scalar]
#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// Floating-point operations of layer l's forward pass and backward pass for one image.
struct Flops {
  double forward = 0.0, backward = 0.0;
};
Flops LayerFlops(const tj::model::Graph& g, const tj::model::Layer& l) {
  using tj::model::LayerType;
  double macs = 0.0;
  const double positions = static_cast<double>(l.out.h) * l.out.w;
  switch (l.type) {
    case LayerType::kConv2D: {
      const int group_channels = l.in.c / l.groups;  // exact: groups divide the channels
      macs = positions * l.filters * l.kh * l.kw * group_channels;
      break;
    }
    case LayerType::kDepthwiseConv2D:
      macs = positions * l.out.c * l.kh * l.kw;
      break;
    case LayerType::kDense:
      macs = static_cast<double>(l.in.c) * l.filters;
      break;
    default:
      return {};
  }
  const bool input_gradient = l.inputs[0] != g.input;
  return {2.0 * macs, 2.0 * macs * (input_gradient ? 2.0 : 1.0)};
}

#if defined(__x86_64__)
constexpr long kPeakIterations = 50'000'000;

double GflopsSince(std::chrono::steady_clock::time_point start, int lanes) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * 16 * lanes * static_cast<double>(kPeakIterations) / s / 1e9;
}

// 16 independent multiply-add chains: enough to cover the latency of two FMA units.
__attribute__((target("avx512f"))) double PeakAvx512() {
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_set1_ps(1.0f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  const auto start = std::chrono::steady_clock::now();
  for (long it = 0; it < kPeakIterations; ++it) {
    for (__m512& a : acc) a = _mm512_fmadd_ps(a, x, y);
  }
  alignas(64) float lanes[16];
  float sink = 0.0f;
  for (const __m512& a : acc) {
    _mm512_store_ps(lanes, a);
    sink += lanes[0];
  }
  const double gflops = GflopsSince(start, 16);
  return sink == 0.0f ? 0.0 : gflops;  // uses the sums, so the loop stays
}

#endif

// This core's measured float32 multiply-add rate in GFLOP/s (0: not measured here).
double MeasuredPeak(const char** what) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) {
    *what = "AVX-512 FMA";
    return PeakAvx512();
  }
#endif
  *what = "none";
  return 0.0;
}

int Usage() {
  std::fprintf(stderr,
               "usage: tj-bench-model MODEL.json [--batch N] [--threads N] [--steps N] "
               "[--no-fuse] [--peak] [--target NAME]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string path = argv[1];
  int batch = 64, threads = 1, steps = 20;
  bool fuse = true, peak = false;
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
    } else if (a == "--peak") {
      peak = true;
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
  double peak_gflops = 0.0;
  if (peak) {
    const char* what = "";
    peak_gflops = MeasuredPeak(&what);
    std::printf("measured peak of one core (%s, 16 chains): %.1f GFLOP/s\n", what, peak_gflops);
  }
  std::printf("  %-28s %-20s %9s %9s %10s %8s\n", "layer", "class", "fwd ms", "bwd ms", "GFLOP/s",
              peak_gflops > 0 ? "of peak" : "");
  double weighted_ms = 0.0, weighted_flops = 0.0;
  // The fused seeds' conv + pool pair is timed as the pool: the conv's work counts there.
  Flops carried;
  for (int i : g.order) {
    const tj::model::Layer& l = g.layers[i];
    const double fwd = 1000.0 * engine.times().forward[i] / runs;
    const double bwd = 1000.0 * engine.times().backward[i] / runs;
    Flops f = LayerFlops(g, l);
    f.forward += carried.forward;
    f.backward += carried.backward;
    carried = Flops{};
    std::printf("  %-28s %-20s %9.3f %9.3f", l.name.c_str(), l.keras_class.c_str(), fwd, bwd);
    if (engine.Output(i) == nullptr) {  // fused into the next layer
      carried = f;
      std::printf("   fused: timed with the next layer\n");
      continue;
    }
    if (f.forward > 0.0) {
      const double gflops = batch * (f.forward + f.backward) / ((fwd + bwd) * 1e6);
      weighted_ms += fwd + bwd;
      weighted_flops += batch * (f.forward + f.backward);
      std::printf(" %10.1f", gflops);
      if (peak_gflops > 0) std::printf(" %7.1f%%", 100.0 * gflops / peak_gflops / threads);
    }
    std::printf("\n");
  }
  if (weighted_ms > 0) {
    std::printf("layers with weights: %.1f ms of the step, %.2f GFLOP, %.1f GFLOP/s\n", weighted_ms,
                weighted_flops / 1e9, weighted_flops / (weighted_ms * 1e6));
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
