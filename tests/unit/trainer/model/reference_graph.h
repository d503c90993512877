// A plain float64 forward pass of a declared model (no im2col, no SIMD, no threads): each
// layer written from its definition, for the engine's finite-difference gradient checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/random.h"
#include "trainer/model/graph.h"

namespace tj::model::testing {

struct ReferenceOptions {
  bool training = true;
  uint64_t dropout_seed = 0;
};

using Rows = std::vector<double>;  // rows x size

inline double Act(const Layer& l, double y) {
  if (l.activation != Activation::kRelu) return y;
  return std::min(std::max(y, 0.0), static_cast<double>(l.relu_max));
}

// out[r][oy][ox][o] of a Conv2D (depthwise: one input channel per output).
inline Rows RefConv(const Layer& l, const Rows& x, int rows, const double* kernel,
                    const double* bias) {
  const Shape& in = l.in;
  const Shape& out = l.out;
  const bool depthwise = l.type == LayerType::kDepthwiseConv2D;
  const int cg = depthwise ? 1 : in.c / l.groups;
  const int og = depthwise ? l.depth_multiplier : l.filters / l.groups;
  Rows y(static_cast<size_t>(rows) * out.size());
  for (int r = 0; r < rows; ++r)
    for (int oy = 0; oy < out.h; ++oy)
      for (int ox = 0; ox < out.w; ++ox)
        for (int o = 0; o < out.c; ++o) {
          const int group = o / og;
          double acc = bias != nullptr ? bias[o] : 0.0;
          for (int ky = 0; ky < l.kh; ++ky)
            for (int kx = 0; kx < l.kw; ++kx) {
              const int iy = oy * l.sh - l.pad_top + ky, ix = ox * l.sw - l.pad_left + kx;
              if (iy < 0 || iy >= in.h || ix < 0 || ix >= in.w) continue;
              for (int ci = 0; ci < cg; ++ci) {
                const int c = group * cg + ci;
                const double v = x[((static_cast<size_t>(r) * in.h + iy) * in.w + ix) * in.c + c];
                const size_t tap = static_cast<size_t>(ky) * l.kw + kx;
                acc += v * (depthwise ? kernel[(tap * in.c + c) * og + o % og]
                                      : kernel[(tap * cg + ci) * out.c + o]);
              }
            }
          y[((static_cast<size_t>(r) * out.h + oy) * out.w + ox) * out.c + o] = Act(l, acc);
        }
  return y;
}

inline Rows RefPool(const Layer& l, const Rows& x, int rows) {
  const Shape& in = l.in;
  const Shape& out = l.out;
  Rows y(static_cast<size_t>(rows) * out.size());
  for (int r = 0; r < rows; ++r)
    for (int oy = 0; oy < out.h; ++oy)
      for (int ox = 0; ox < out.w; ++ox)
        for (int c = 0; c < out.c; ++c) {
          double best = -1e300, sum = 0.0;
          int count = 0;
          for (int ky = 0; ky < l.kh; ++ky)
            for (int kx = 0; kx < l.kw; ++kx) {
              const int iy = oy * l.sh - l.pad_top + ky, ix = ox * l.sw - l.pad_left + kx;
              if (iy < 0 || iy >= in.h || ix < 0 || ix >= in.w) continue;
              const double v = x[((static_cast<size_t>(r) * in.h + iy) * in.w + ix) * in.c + c];
              best = std::max(best, v);
              sum += v;
              ++count;
            }
          y[((static_cast<size_t>(r) * out.h + oy) * out.w + ox) * out.c + c] =
              l.type == LayerType::kMaxPool ? best : sum / count;
        }
  return y;
}

inline Rows RefBatchNorm(const Layer& l, const Rows& x, int rows, const double* params,
                         const double* state, bool training) {
  const int C = l.out.c;
  const size_t count = x.size() / C;
  std::vector<double> mean(C, 0.0), var(C, 0.0);
  for (int c = 0; c < C; ++c) {
    if (training) {
      for (size_t i = 0; i < count; ++i) mean[c] += x[i * C + c];
      mean[c] /= count;
      for (size_t i = 0; i < count; ++i)
        var[c] += (x[i * C + c] - mean[c]) * (x[i * C + c] - mean[c]);
      var[c] /= count;
    } else {
      mean[c] = state[l.state[0].offset + c];
      var[c] = state[l.state[1].offset + c];
    }
  }
  Rows y(x.size());
  (void)rows;
  for (size_t i = 0; i < count; ++i)
    for (int c = 0; c < C; ++c) {
      double v = (x[i * C + c] - mean[c]) / std::sqrt(var[c] + static_cast<double>(l.epsilon));
      if (l.gamma >= 0) v *= params[l.params[l.gamma].offset + c];
      if (l.beta >= 0) v += params[l.params[l.beta].offset + c];
      y[i * C + c] = v;
    }
  return y;
}

// Layer `index`'s output from its inputs' outputs.
inline Rows RefLayer(const Graph& g, int index, const std::vector<Rows>& acts, int rows,
                     const double* params, const double* state, const ReferenceOptions& o) {
  const Layer& l = g.layers[index];
  const Rows& x = acts[l.inputs[0]];
  auto p = [&](int i) { return i < 0 ? nullptr : params + l.params[i].offset; };
  Rows y(static_cast<size_t>(rows) * l.out.size(), 0.0);
  switch (l.type) {
    case LayerType::kConv2D:
    case LayerType::kDepthwiseConv2D:
      return RefConv(l, x, rows, p(l.kernel), p(l.bias));
    case LayerType::kMaxPool:
    case LayerType::kAvgPool:
      return RefPool(l, x, rows);
    case LayerType::kBatchNorm:
      return RefBatchNorm(l, x, rows, params, state, o.training);
    case LayerType::kDense:
      for (int r = 0; r < rows; ++r)
        for (int u = 0; u < l.filters; ++u) {
          double acc = l.bias >= 0 ? p(l.bias)[u] : 0.0;
          for (int k = 0; k < l.in.c; ++k) {
            acc += x[static_cast<size_t>(r) * l.in.c + k] * p(l.kernel)[k * l.filters + u];
          }
          y[static_cast<size_t>(r) * l.filters + u] = Act(l, acc);
        }
      return y;
    case LayerType::kGlobalAvgPool: {
      const size_t positions = l.in.size() / l.in.c;
      for (int r = 0; r < rows; ++r)
        for (size_t q = 0; q < positions; ++q)
          for (int c = 0; c < l.in.c; ++c) {
            y[static_cast<size_t>(r) * l.in.c + c] +=
                x[(r * positions + q) * l.in.c + c] / static_cast<double>(positions);
          }
      return y;
    }
    case LayerType::kDropout:
      for (int r = 0; r < rows; ++r) {
        SplitMix64 rng(DeriveSeed(DeriveSeed(o.dropout_seed, index), r));
        for (size_t i = 0; i < l.out.size(); ++i) {
          const size_t at = r * l.out.size() + i;
          const bool keep = !o.training || l.rate == 0.0f || rng.NextFloat() >= l.rate;
          const double scale = o.training ? 1.0 / (1.0 - l.rate) : 1.0;
          y[at] = keep ? x[at] * scale : 0.0;
        }
      }
      return y;
    case LayerType::kAdd:
      for (int input : l.inputs)
        for (size_t i = 0; i < y.size(); ++i) y[i] += acts[input][i];
      return y;
    case LayerType::kRescaling:
      for (size_t i = 0; i < y.size(); ++i) y[i] = x[i] * l.rescale + l.offset;
      return y;
    case LayerType::kActivation:
      for (size_t i = 0; i < y.size(); ++i) y[i] = Act(l, x[i]);
      return y;
    case LayerType::kZeroPadding:
      for (int r = 0; r < rows; ++r)
        for (int iy = 0; iy < l.in.h; ++iy)
          for (int ix = 0; ix < l.in.w; ++ix)
            for (int c = 0; c < l.in.c; ++c) {
              const size_t to = ((static_cast<size_t>(r) * l.out.h + iy + l.pad_top) * l.out.w +
                                 ix + l.pad_left) *
                                    l.out.c +
                                c;
              y[to] = x[((static_cast<size_t>(r) * l.in.h + iy) * l.in.w + ix) * l.in.c + c];
            }
      return y;
    case LayerType::kFlatten:
    case LayerType::kInput:
      return x;
  }
  return y;
}

// The mean softmax cross-entropy of the rows; their logits into *logits when given.
inline double ReferenceLoss(const Graph& g, const std::vector<double>& params,
                            const std::vector<double>& state, const std::vector<double>& images,
                            const std::vector<int>& labels, const ReferenceOptions& options,
                            std::vector<double>* logits = nullptr) {
  const int rows = static_cast<int>(labels.size());
  std::vector<Rows> acts(g.layers.size());
  acts[g.input] = images;
  for (int i : g.order) {
    if (i == g.input) continue;
    acts[i] = RefLayer(g, i, acts, rows, params.data(), state.data(), options);
  }
  const Rows& z = acts[g.output];
  const int classes = g.classes();
  double total = 0.0;
  for (int r = 0; r < rows; ++r) {
    const double* zr = &z[static_cast<size_t>(r) * classes];
    const double m = *std::max_element(zr, zr + classes);
    double s = 0.0;
    for (int c = 0; c < classes; ++c) s += std::exp(zr[c] - m);
    total += m + std::log(s) - zr[labels[r]];
  }
  if (logits != nullptr) *logits = z;
  return total / rows;
}

}  // namespace tj::model::testing
