#include "trainer/model/cpu_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/random.h"
#include "trainer/model/layer_kernels.h"
#include "trainer/nn/model.h"

namespace tj::model {
namespace {

using kernels::Window;
using kernels::WindowOf;

// The dense kernels' dot products run over multiples of 32 floats.
int Padded(int k) { return (k + 31) / 32 * 32; }

// Images whose kernel-gradient contributions a convolution sums into one partial, before the
// partials are summed in order: a constant, so that the sums do not depend on the threads.
constexpr int kImagesPerPartial = 8;

// Layers of less work than this (Plan::Work) run on the calling thread alone: waking the pool
// and waiting for it (microseconds when idle, far more when other processes hold the cores)
// would cost more than the split saves. MobileNetV2's late layers, at 2x2 and 1x1 pixels, are
// such; the results are the same bits either way.
constexpr double kParallelWork = 1 << 18;

// Rows of a Dense layer's input gradient computed at once.
constexpr int kDenseChunk = 8;

// One layer's buffers.
struct Node {
  const Layer* layer = nullptr;
  size_t size = 0;               // floats of one row's output
  std::vector<float> out, dout;  // max_rows x size: the output and d loss / d output
  bool accumulate = false;       // backward: dout holds a contribution already
  // Conv2D and Dense: the kernel packed output-major, out x kp (columns k < K per group).
  int k = 0, kp = 0, og = 0;
  std::vector<float> wt;
  // Conv2D: the kernel packed for gemm, per group K x np (np: og rounded up to gemm's column
  // padding), its bias per group np floats.
  int np = 0;
  std::vector<float> wk, bias, dwt;
  // Conv2D of stride 1 without groups: the kernel flipped and transposed, (kh, kw, filters) x
  // np_in (the input channels rounded up to gemm's column padding), whose convolution of d
  // output is d input.
  int flipped_k = 0, np_in = 0;
  std::vector<float> flipped;
  std::vector<float> padded;             // Dense with K % 32 != 0: its inputs, max_rows x kp
  std::vector<int32_t> argmax;           // MaxPooling2D: the winner of each output
  std::vector<float> mask;               // Dropout in training: 0 or 1 / (1 - rate) per element
  bool masked = false;                   // the last forward pass applied `mask`
  std::vector<float> mean, invstd, inv;  // BatchNormalization: per channel
  // The seeds' conv + pool, fused: the pool runs both; the conv itself is skipped.
  bool fused_away = false;
  int fused_conv = -1;           // on the pool: the conv's index
  std::vector<uint8_t> winners;  // on the pool: which of the 4 window positions won
};

// y = the layer's activation of x (x may be y). Branch-free with the parameters in locals, so
// that the compiler vectorises it.
void Activate(const Layer& layer, const float* x, float* y, size_t n) {
  if (layer.activation != Activation::kRelu) {
    if (x != y) std::copy(x, x + n, y);
    return;
  }
  const float cap = layer.relu_max;
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i] > 0.0f ? x[i] : 0.0f;
    y[i] = v < cap ? v : cap;
  }
}

// d loss / d input of the activation from d loss / d output, into dx (added when `add`):
// ReLU passes where `at` (its output, or its input) lies inside (0, max).
void ActivationBackward(const Layer& layer, const float* at, const float* dy, float* dx, size_t n,
                        bool add) {
  const bool relu = layer.activation == Activation::kRelu;
  const float cap = relu ? layer.relu_max : std::numeric_limits<float>::infinity();
  const float floor = relu ? 0.0f : -std::numeric_limits<float>::infinity();
  // Every operand loaded whatever the test says (no short-circuit): the loops vectorise
  // instead of branching on each element's sign.
  if (add) {
    for (size_t i = 0; i < n; ++i) {
      const float d = dy[i], v = at[i];
      dx[i] += static_cast<int>(v > floor) & static_cast<int>(v < cap) ? d : 0.0f;
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float d = dy[i], v = at[i];
      dx[i] = static_cast<int>(v > floor) & static_cast<int>(v < cap) ? d : 0.0f;
    }
  }
}

// s[c] = the sum over the positions of x[p][c], or, with a centre, of (x[p][c] - centre[c])^2,
// in double, positions in order.
void ChannelSums(const float* __restrict__ x, size_t positions, int channels,
                 const double* __restrict__ centre, double* __restrict__ s) {
  std::fill(s, s + channels, 0.0);
  for (size_t p = 0; p < positions; ++p) {
    const float* xp = x + p * channels;
    if (centre == nullptr) {
      for (int c = 0; c < channels; ++c) s[c] += xp[c];
    } else {
      for (int c = 0; c < channels; ++c) {
        const double d = xp[c] - centre[c];
        s[c] += d * d;
      }
    }
  }
}

// BatchNormalization's backward sums of one row: s[c] = sum dy, s[C + c] = sum dy * xhat with
// xhat = (x - mean) * invstd, in double.
void BatchNormSums(const float* __restrict__ x, const float* __restrict__ dy, size_t positions,
                   int channels, const float* __restrict__ mean, const float* __restrict__ invstd,
                   double* __restrict__ s) {
  std::fill(s, s + 2 * channels, 0.0);
  for (size_t p = 0; p < positions; ++p) {
    const float* xp = x + p * channels;
    const float* gp = dy + p * channels;
    for (int c = 0; c < channels; ++c) {
      const double xhat = (static_cast<double>(xp[c]) - mean[c]) * invstd[c];
      s[c] += gp[c];
      s[channels + c] += gp[c] * xhat;
    }
  }
}

// y += x (x may not be y).
void AddTo(const float* __restrict__ x, float* __restrict__ y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

// dst[j * dst_stride + i] = src[i * src_stride + j] for i in [i0, i1), j in [j0, j1), in tiles
// that stay in the L1 cache.
void TransposeTiles(const float* __restrict__ src, size_t src_stride, float* __restrict__ dst,
                    size_t dst_stride, size_t i0, size_t i1, size_t j0, size_t j1) {
  constexpr size_t kTile = 16;
  for (size_t ib = i0; ib < i1; ib += kTile) {
    const size_t ie = std::min(ib + kTile, i1);
    for (size_t jb = j0; jb < j1; jb += kTile) {
      const size_t je = std::min(jb + kTile, j1);
      for (size_t j = jb; j < je; ++j) {
        for (size_t i = ib; i < ie; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
      }
    }
  }
}

bool IsSeedsConv(const Layer& l) {
  return l.type == LayerType::kConv2D && l.in == Shape{28, 28, 1, false} && l.filters == 32 &&
         l.kh == 3 && l.kw == 3 && l.sh == 1 && l.sw == 1 && l.padding == Padding::kValid &&
         l.groups == 1 && l.use_bias && l.activation == Activation::kRelu && std::isinf(l.relu_max);
}

bool IsSeedsPool(const Layer& l) {
  return l.type == LayerType::kMaxPool && l.kh == 2 && l.kw == 2 && l.sh == 2 && l.sw == 2 &&
         l.padding == Padding::kValid;
}

}  // namespace

struct CpuEngine::Plan {
  const Graph& graph;
  int max_rows;
  nn::ThreadPool* pool;
  const nn::cpu::Kernels& kernels;
  std::vector<Node> nodes;  // by index into graph.layers
  // Per member: im2col rows, and scratch (col2im's gradient rows, a group's outputs, Dense's
  // padded input gradients, depthwise accumulators).
  std::vector<std::vector<float>> col, dcol;
  std::vector<float> partials;    // per-row (or per image group) gradients, summed after
  std::vector<double> row_stats;  // per-row sums (BatchNormalization)
  std::vector<float> zeros;       // the bias of layers without one
  std::vector<double> row_loss;
  std::vector<uint8_t> row_correct;
  int rows = 0;
  bool fused = false;
  bool serial = false;  // the layer at hand runs on the caller alone (Run)

  // A layer's work in a pass, roughly in multiply-adds: its elements times the taps (or
  // inputs) each one sums.
  double Work(const Layer& l) const {
    double per_element = 1.0;
    const int group_channels = l.in.c / l.groups;  // exact: groups divide the channels
    if (l.type == LayerType::kConv2D) per_element = l.kh * l.kw * group_channels;
    if (l.type == LayerType::kDepthwiseConv2D) per_element = l.kh * l.kw;
    if (l.type == LayerType::kDense) per_element = l.in.c;
    return static_cast<double>(rows) * std::max(l.in.size(), l.out.size()) * per_element;
  }

  // Per-call state.
  const float* params = nullptr;
  float* state = nullptr;
  StepOptions options;

  Plan(const Graph& g, int max_rows_, nn::ThreadPool* pool_, const nn::cpu::Kernels& k)
      : graph(g), max_rows(max_rows_), pool(pool_), kernels(k) {}

  // fn(member, members) on every member of the pool, or on the caller alone (member 0 of 1)
  // while `serial`: every split below gives the same bits for any number of members.
  template <typename Fn>
  void Run(const Fn& fn) {
    if (serial) return fn(0, 1);
    pool->Run(fn);
  }
  // fn(member, r0, r1) on every member with rows, the rows split as everywhere in a pass.
  template <typename Fn>
  void ForRows(const Fn& fn) {
    Run([&](int member, int members) {
      auto [r0, r1] = nn::SplitRange(rows, members, member);
      if (r0 < r1) fn(member, r0, r1);
    });
  }
  // fn(begin, end) on every member's share of [0, count).
  template <typename Fn>
  void ForRange(size_t count, const Fn& fn) {
    Run([&](int member, int members) {
      auto [b, e] = nn::SplitRange(static_cast<int>(count), members, member);
      if (b < e) fn(static_cast<size_t>(b), static_cast<size_t>(e));
    });
  }

  const float* Param(const Layer& l, int index) const {
    return index < 0 ? nullptr : params + l.params[index].offset;
  }
  const float* In(const Node& n, int which = 0) const {
    return nodes[n.layer->inputs[which]].out.data();
  }
  // Where layer `input`'s gradient goes for rows [r0, r1): zeroed first if nothing has
  // contributed yet (and `first`: this layer has not taken it already, as Add([x, x]) does);
  // null when no one needs it (the input image without input_gradient).
  float* GradTarget(int input, int r0, int r1, bool first = true) {
    if (input == graph.input && !options.input_gradient) return nullptr;
    Node& n = nodes[input];
    if (!n.accumulate && first) {
      std::fill(n.dout.begin() + static_cast<ptrdiff_t>(r0 * n.size),
                n.dout.begin() + static_cast<ptrdiff_t>(r1 * n.size), 0.0f);
    }
    return n.dout.data();
  }
  void MarkContributed(const Node& n) {
    for (int i : n.layer->inputs) nodes[i].accumulate = true;
  }

  void Build(bool fuse);
  void Pack(Node& n);
  void Forward(const Batch& batch, LayerTimes* times);
  void Backward(LayerTimes* times);
  void ForwardLayer(int index, const Batch& batch);
  void BackwardLayer(int index);

  void ConvForward(Node& n);
  void ConvBackward(Node& n, float* grad_out);
  void DenseForward(Node& n);
  void DenseBackward(Node& n, float* grad_out);
  void DepthwiseForward(Node& n);
  void DepthwiseBackward(Node& n, float* grad_out);
  void BatchNormForward(Node& n);
  void BatchNormBackward(Node& n, float* grad_out);
  void SeedsConvPoolForward(Node& p);
  void SeedsConvPoolBackward(Node& p, float* grad_out);
  void SimpleForward(Node& n, int index, const Batch& batch);
  void SimpleBackward(Node& n);
  // out[e] (e in [0, count)) = the sum over rows, in row order, of partials[r * stride +
  // source(e)].
  template <typename Source>
  void SumRows(size_t count, size_t stride, const Source& source, float* out);

  float* grad = nullptr;
};

void CpuEngine::Plan::Build(bool fuse) {
  const size_t rows = static_cast<size_t>(max_rows);
  nodes.resize(graph.layers.size());
  size_t col_size = 1, scratch = 1, per_row = 1, conv_partials = 1, dense_partials = 1,
         channels = 1, widest = 1;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    const Layer& l = graph.layers[i];
    Node& n = nodes[i];
    n.layer = &l;
    n.size = l.out.size();
    n.out.assign(rows * n.size + nn::cpu::kGemmColumnPad, 0.0f);
    // gemm reads rows of outputs and of their gradients up to the next multiple of its column
    // padding.
    n.dout.assign(rows * n.size + nn::cpu::kGemmColumnPad, 0.0f);
    widest = std::max(widest, static_cast<size_t>(l.out.c));
    const size_t window = static_cast<size_t>(l.kh) * l.kw;
    switch (l.type) {
      case LayerType::kConv2D:
        n.og = l.filters / l.groups;
        n.k = static_cast<int>(window) * (l.in.c / l.groups);
        n.kp = Padded(n.k);
        n.wt.assign(static_cast<size_t>(l.filters) * n.kp, 0.0f);
        n.dwt.assign(n.wt.size(), 0.0f);
        n.np = (n.og + nn::cpu::kGemmColumnPad - 1) / nn::cpu::kGemmColumnPad *
               nn::cpu::kGemmColumnPad;
        n.wk.assign(static_cast<size_t>(l.groups) * n.k * n.np, 0.0f);
        n.bias.assign(static_cast<size_t>(l.groups) * n.np, 0.0f);
        col_size = std::max(col_size, static_cast<size_t>(l.out.h) * l.out.w * n.kp);
        scratch = std::max(scratch, static_cast<size_t>(l.out.h) * l.out.w * n.kp);
        conv_partials = std::max(
            conv_partials, (rows + kImagesPerPartial - 1) / kImagesPerPartial * l.filters * n.kp);
        if (l.groups == 1 && l.sh == 1 && l.sw == 1) {
          n.flipped_k = static_cast<int>(window) * l.filters;
          n.np_in = (l.in.c + nn::cpu::kGemmColumnPad - 1) / nn::cpu::kGemmColumnPad *
                    nn::cpu::kGemmColumnPad;
          n.flipped.assign(static_cast<size_t>(n.flipped_k) * n.np_in, 0.0f);
          col_size = std::max(col_size, l.in.size() / l.in.c * n.flipped_k);
        }
        break;
      case LayerType::kDense:
        n.og = l.filters;
        n.k = l.in.c;
        n.kp = Padded(n.k);
        n.wt.assign(static_cast<size_t>(l.filters) * n.kp, 0.0f);
        if (n.kp != n.k) n.padded.assign(rows * n.kp, 0.0f);
        dense_partials = std::max(dense_partials, n.wt.size());
        scratch = std::max(scratch, static_cast<size_t>(kDenseChunk) * n.kp);
        break;
      case LayerType::kDepthwiseConv2D:
        per_row = std::max(per_row, (window + 1) * l.out.c);
        scratch = std::max({scratch, static_cast<size_t>(l.out.c), l.in.size()});
        break;
      case LayerType::kMaxPool:
        n.argmax.assign(rows * n.size, 0);
        break;
      case LayerType::kDropout:
        n.mask.assign(rows * n.size, 1.0f);
        break;
      case LayerType::kBatchNorm:
        channels = std::max(channels, static_cast<size_t>(l.out.c));
        n.mean.assign(l.out.c, 0.0f);
        n.invstd.assign(l.out.c, 0.0f);
        n.inv.assign(l.out.c, 0.0f);
        break;
      default:
        break;
    }
  }
  // The seeds' conv + pool pair runs fused when the conv feeds the pool alone.
  for (size_t i = 0; fuse && i < graph.layers.size(); ++i) {
    const Layer& l = graph.layers[i];
    if (!IsSeedsPool(l) || !IsSeedsConv(graph.layers[l.inputs[0]])) continue;
    const int conv = l.inputs[0];
    int users = 0;
    for (const Layer& other : graph.layers) {
      users += static_cast<int>(std::count(other.inputs.begin(), other.inputs.end(), conv));
    }
    if (users != 1 || conv == graph.output) continue;
    nodes[conv].fused_away = true;
    nodes[conv].out.clear();
    nodes[conv].dout.clear();
    nodes[i].fused_conv = conv;
    nodes[i].winners.assign(rows * nodes[i].size, 0);
    per_row = std::max<size_t>(per_row, 9 * 32 + 32);
    fused = true;
  }
  const int members = pool->size();
  col.assign(members, std::vector<float>(col_size, 0.0f));
  dcol.assign(members, std::vector<float>(scratch, 0.0f));
  partials.assign(std::max({rows * per_row, dense_partials, conv_partials}), 0.0f);
  row_stats.assign(rows * 2 * channels, 0.0);
  zeros.assign(widest, 0.0f);
  row_loss.assign(rows, 0.0);
  row_correct.assign(rows, 0);
}

// The layer's kernel packed out x kp: wt[o][k] = kernel[k * out + o] (Keras' (K, out)).
void CpuEngine::Plan::Pack(Node& n) {
  const float* kernel = Param(*n.layer, n.layer->kernel);
  const size_t outputs = n.layer->filters;
  ForRange(outputs, [&](size_t o0, size_t o1) {
    TransposeTiles(kernel, outputs, n.wt.data(), n.kp, 0, n.k, o0, o1);
  });
}

template <typename Source>
void CpuEngine::Plan::SumRows(size_t count, size_t stride, const Source& source, float* out) {
  ForRange(count, [&](size_t e0, size_t e1) {
    std::fill(out + e0, out + e1, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* row = partials.data() + r * stride;
      for (size_t e = e0; e < e1; ++e) out[e] += row[source(e)];
    }
  });
}

// The kernel of each group packed K x np (columns past og zero) and the bias likewise, as
// gemm reads them; then per image im2col (none for a 1x1 convolution of stride 1 without
// padding: the image is its own patch matrix) and gemm with bias and activation fused.
void CpuEngine::Plan::ConvForward(Node& n) {
  const Layer& l = *n.layer;
  const Node& in = nodes[l.inputs[0]];
  const Window w = WindowOf(l);
  const int positions = w.positions(), cg = l.in.c / l.groups;
  const float* kernel = Param(l, l.kernel);
  const float* bias = l.bias >= 0 ? Param(l, l.bias) : nullptr;
  const size_t group_size = static_cast<size_t>(n.k) * n.np;
  ForRange(static_cast<size_t>(l.groups) * n.k, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) {
      const size_t g = i / n.k, k = i % n.k;
      const float* from = kernel + k * l.filters + g * n.og;
      float* to = n.wk.data() + g * group_size + k * n.np;
      std::copy(from, from + n.og, to);
    }
  });
  for (int g = 0; bias != nullptr && g < l.groups; ++g) {
    std::copy(bias + g * n.og, bias + (g + 1) * n.og, n.bias.data() + g * n.np);
  }
  const bool relu = l.activation == Activation::kRelu;
  const float lo = relu ? 0.0f : -std::numeric_limits<float>::infinity();
  const float hi = relu ? l.relu_max : std::numeric_limits<float>::infinity();
  const bool direct = l.groups == 1 && l.kh == 1 && l.kw == 1 && l.sh == 1 && l.sw == 1;
  ForRows([&](int member, int r0, int r1) {
    float* c = col[member].data();
    for (int r = r0; r < r1; ++r) {
      const float* x = in.out.data() + r * in.size;
      float* y = n.out.data() + r * n.size;
      for (int g = 0; g < l.groups; ++g) {
        const float* a = x;
        int lda = l.in.c;
        if (!direct) {
          kernels::Im2Col(x, w, g * cg, cg, n.kp, c);
          a = c;
          lda = n.kp;
        }
        kernels.gemm(a, lda, 1, n.wk.data() + g * group_size, n.np,
                     bias != nullptr ? n.bias.data() + g * n.np : nullptr, positions, n.k, n.og, lo,
                     hi, false, y + g * n.og, l.filters);
      }
    }
  });
}

// Per image, d input: the activation's backward pass, then (stride 1, no groups) gemm of d
// output's patches and the flipped kernel accumulated onto d input, or gemm of d output and
// the packed kernel, and col2im. Then the kernel gradient (below) and the bias gradient, each
// element summed over the batch's positions in an order fixed by the shapes.
void CpuEngine::Plan::ConvBackward(Node& n, float* grad_out) {
  if (n.flipped.empty()) Pack(n);
  const Layer& l = *n.layer;
  const Node& in = nodes[l.inputs[0]];
  const Window w = WindowOf(l);
  const int positions = w.positions(), cg = l.in.c / l.groups, outputs = l.filters;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (!n.flipped.empty()) {
    // flipped[(ky', kx', o)][c] = kernel[(kh-1-ky', kw-1-kx', c)][o].
    const float* kernel = Param(l, l.kernel);
    const int cin = l.in.c;
    ForRange(static_cast<size_t>(l.kh) * l.kw, [&](size_t t0, size_t t1) {
      for (size_t t = t0; t < t1; ++t) {
        const size_t from_tap = static_cast<size_t>(l.kh) * l.kw - 1 - t;
        for (int o = 0; o < outputs; ++o) {
          float* to = n.flipped.data() + (t * outputs + o) * n.np_in;
          for (int c = 0; c < cin; ++c) to[c] = kernel[(from_tap * cin + c) * outputs + o];
        }
      }
    });
  }
  // Stride 1: d input is d output's "full" convolution with the flipped kernel, padded by
  // kh - 1 - pad_top above and kw - 1 - pad_left left (a 1x1 convolution: d output itself).
  Window back;
  back.in_h = l.out.h;
  back.in_w = l.out.w;
  back.channels = outputs;
  back.out_h = l.in.h;
  back.out_w = l.in.w;
  back.kh = l.kh;
  back.kw = l.kw;
  back.pad_top = l.kh - 1 - w.pad_top;
  back.pad_left = l.kw - 1 - w.pad_left;
  const bool pointwise = l.kh == 1 && l.kw == 1 && w.pad_top == 0 && w.pad_left == 0;
  ForRows([&](int member, int r0, int r1) {
    float* c = col[member].data();
    float* dc = dcol[member].data();
    float* dx = GradTarget(l.inputs[0], r0, r1);
    for (int r = r0; r < r1; ++r) {
      float* dy = n.dout.data() + r * n.size;
      ActivationBackward(l, n.out.data() + r * n.size, dy, dy, n.size, false);
      if (dx == nullptr) continue;
      if (!n.flipped.empty()) {
        const float* a = dy;
        if (!pointwise) {
          kernels::Im2Col(dy, back, 0, outputs, n.flipped_k, c);
          a = c;
        }
        kernels.gemm(a, pointwise ? outputs : n.flipped_k, 1, n.flipped.data(), n.np_in, nullptr,
                     l.in.h * l.in.w, n.flipped_k, l.in.c, -kInf, kInf, true, dx + r * in.size,
                     l.in.c);
        continue;
      }
      for (int g = 0; g < l.groups; ++g) {
        kernels.gemm(dy + g * n.og, outputs, 1, n.wt.data() + g * n.og * n.kp, n.kp, nullptr,
                     positions, n.og, n.kp, -kInf, kInf, false, dc, n.kp);
        kernels::Col2ImAdd(dc, w, g * cg, cg, n.kp, dx + r * in.size);
      }
    }
  });
  MarkContributed(n);
  float* dkernel = grad_out + l.params[l.kernel].offset;
  if (l.bias >= 0) {
    float* dbias = grad_out + l.params[l.bias].offset;
    const size_t count = static_cast<size_t>(rows) * positions;
    ForRange(outputs, [&](size_t o0, size_t o1) {
      std::fill(dbias + o0, dbias + o1, 0.0f);
      for (size_t j = 0; j < count; ++j) {
        const float* dy = n.dout.data() + j * outputs;
        for (size_t o = o0; o < o1; ++o) dbias[o] += dy[o];
      }
    });
  }
  // Per group of kImagesPerPartial images (fixed, whatever the thread count): its partial
  // kernel gradient (out x kp, packed) = d output transposed x the patches, summed over the
  // group's positions in order, one image's patches at a time (they stay in the L2 cache; a
  // 1x1 convolution of stride 1 reads its input instead); then the partials summed in order.
  const bool direct = l.groups == 1 && l.kh == 1 && l.kw == 1 && l.sh == 1 && l.sw == 1;
  const int image_groups = (rows + kImagesPerPartial - 1) / kImagesPerPartial;
  const size_t partial_size = static_cast<size_t>(outputs) * n.kp;
  Run([&](int member, int members) {
    auto [b0, b1] = nn::SplitRange(image_groups, members, member);
    float* c = col[member].data();
    for (int ig = b0; ig < b1; ++ig) {
      const int i0 = ig * kImagesPerPartial, i1 = std::min(rows, i0 + kImagesPerPartial);
      float* partial = partials.data() + ig * partial_size;
      for (int g = 0; g < l.groups; ++g) {
        const float* dy = n.dout.data() + g * n.og;
        float* dw = partial + static_cast<size_t>(g) * n.og * n.kp;
        if (direct) {
          kernels.gemm(dy + i0 * n.size, 1, outputs, in.out.data() + i0 * in.size, l.in.c, nullptr,
                       n.og, (i1 - i0) * positions, n.k, -kInf, kInf, false, dw, n.kp);
          continue;
        }
        for (int r = i0; r < i1; ++r) {
          kernels::Im2Col(in.out.data() + r * in.size, w, g * cg, cg, n.kp, c);
          kernels.gemm(dy + r * n.size, 1, outputs, c, n.kp, nullptr, n.og, positions, n.k, -kInf,
                       kInf, r > i0, dw, n.kp);
        }
      }
    }
  });
  ForRange(partial_size, [&](size_t e0, size_t e1) {
    float* sum = n.dwt.data();
    std::copy(partials.data() + e0, partials.data() + e1, sum + e0);
    for (int ig = 1; ig < image_groups; ++ig) {
      const float* partial = partials.data() + ig * partial_size;
      for (size_t e = e0; e < e1; ++e) sum[e] += partial[e];
    }
  });
  // Keras' kernel (K, out): element (k, o) from packed (o, k).
  ForRange(outputs, [&](size_t o0, size_t o1) {
    TransposeTiles(n.dwt.data(), n.kp, dkernel, outputs, o0, o1, 0, n.k);
  });
}

void CpuEngine::Plan::DenseForward(Node& n) {
  Pack(n);
  const Layer& l = *n.layer;
  const Node& in = nodes[l.inputs[0]];
  const float* bias = l.bias >= 0 ? Param(l, l.bias) : zeros.data();
  const bool fused_relu = l.activation == Activation::kRelu && std::isinf(l.relu_max);
  ForRows([&](int, int r0, int r1) {
    const float* x = in.out.data() + r0 * in.size;
    if (!n.padded.empty()) {
      for (int r = r0; r < r1; ++r) {
        std::copy(in.out.data() + r * in.size, in.out.data() + (r + 1) * in.size,
                  n.padded.data() + r * n.kp);
      }
      x = n.padded.data() + r0 * n.kp;
    }
    float* y = n.out.data() + r0 * n.size;
    kernels.dense_forward(x, r1 - r0, n.kp, n.wt.data(), bias, l.filters, fused_relu, y);
    if (!fused_relu) Activate(l, y, y, (r1 - r0) * n.size);
  });
}

void CpuEngine::Plan::DenseBackward(Node& n, float* grad_out) {
  const Layer& l = *n.layer;
  const Node& in = nodes[l.inputs[0]];
  const int outputs = l.filters;
  ForRows([&](int member, int r0, int r1) {
    float* dy = n.dout.data() + r0 * n.size;
    ActivationBackward(l, n.out.data() + r0 * n.size, dy, dy, (r1 - r0) * n.size, false);
    float* dx = GradTarget(l.inputs[0], r0, r1);
    if (dx == nullptr) return;
    float* dxp = dcol[member].data();  // kDenseChunk rows of kp floats
    for (int c0 = r0; c0 < r1; c0 += kDenseChunk) {
      const int c1 = std::min(c0 + kDenseChunk, r1);
      kernels.dense_backward_input(n.dout.data() + c0 * n.size, c1 - c0, outputs, n.wt.data(), n.kp,
                                   nullptr, dxp);
      for (int r = c0; r < c1; ++r) {
        const float* from = dxp + static_cast<size_t>(r - c0) * n.kp;
        float* target = dx + r * in.size;
        for (int k = 0; k < n.k; ++k) target[k] += from[k];
      }
    }
  });
  MarkContributed(n);
  // The kernel gradient over all rows, split by outputs in blocks of 8; each member then
  // writes its outputs' columns of Keras' (in, out) kernel, and their bias gradients.
  const float* x = n.padded.empty() ? in.out.data() : n.padded.data();
  float* dwt = partials.data();
  float* dkernel = grad_out + l.params[l.kernel].offset;
  float* dbias = l.bias >= 0 ? grad_out + l.params[l.bias].offset : nullptr;
  Run([&](int member, int members) {
    const int blocks = (outputs + 7) / 8;
    auto [b0, b1] = nn::SplitRange(blocks, members, member);
    const int o0 = b0 * 8, o1 = std::min(b1 * 8, outputs);
    if (o0 >= o1) return;
    kernels.dense_backward_weights(n.dout.data(), rows, outputs, x, n.kp, o0, o1, dwt);
    TransposeTiles(dwt, n.kp, dkernel, outputs, o0, o1, 0, n.k);
    if (dbias == nullptr) return;
    for (int o = o0; o < o1; ++o) dbias[o] = 0.0f;
    for (int r = 0; r < rows; ++r) {
      for (int o = o0; o < o1; ++o) dbias[o] += n.dout[r * n.size + o];
    }
  });
}

void CpuEngine::Plan::DepthwiseForward(Node& n) {
  const Layer& l = *n.layer;
  const Node& in = nodes[l.inputs[0]];
  const Window w = WindowOf(l);
  ForRows([&](int member, int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      float* y = n.out.data() + r * n.size;
      kernels::DepthwiseForward(in.out.data() + r * in.size, w, l.depth_multiplier,
                                Param(l, l.kernel), Param(l, l.bias), dcol[member].data(), y);
      Activate(l, y, y, n.size);
    }
  });
}

void CpuEngine::Plan::DepthwiseBackward(Node& n, float* grad_out) {
  const Layer& l = *n.layer;
  const Node& in = nodes[l.inputs[0]];
  const Window w = WindowOf(l);
  const size_t kernel_size = l.params[l.kernel].size, outputs = l.out.c;
  const size_t stride = kernel_size + outputs;
  ForRows([&](int member, int r0, int r1) {
    float* dx = GradTarget(l.inputs[0], r0, r1);
    float* scratch = dcol[member].data();  // d input when no one needs it
    for (int r = r0; r < r1; ++r) {
      float* dy = n.dout.data() + r * n.size;
      ActivationBackward(l, n.out.data() + r * n.size, dy, dy, n.size, false);
      float* part = partials.data() + r * stride;
      float* target = dx != nullptr ? dx + r * in.size : scratch;
      if (dx == nullptr) std::fill(scratch, scratch + in.size, 0.0f);
      kernels::DepthwiseBackward(in.out.data() + r * in.size, dy, w, l.depth_multiplier,
                                 Param(l, l.kernel), part,
                                 l.bias >= 0 ? part + kernel_size : nullptr, target);
    }
  });
  MarkContributed(n);
  SumRows(
      kernel_size, stride, [](size_t e) { return e; }, grad_out + l.params[l.kernel].offset);
  if (l.bias >= 0) {
    SumRows(
        outputs, stride, [&](size_t e) { return kernel_size + e; },
        grad_out + l.params[l.bias].offset);
  }
}

// Training: the batch's mean and (biased) variance per channel, summed per row in double then
// over rows in order; y = x * inv + (beta - mean * inv), inv = gamma / sqrt(var + epsilon), in
// float32 as tf.nn.batch_normalization computes it. Inference (and a frozen layer in training,
// as Keras 3 runs a non-trainable BatchNormalization): the moving statistics, not updated.
void CpuEngine::Plan::BatchNormForward(Node& n) {
  const Layer& l = *n.layer;
  const Node& in = nodes[l.inputs[0]];
  const int C = l.out.c;
  const size_t positions = n.size / C;
  const float* gamma = Param(l, l.gamma);
  const float* beta = Param(l, l.beta);
  float* moving_mean = state + l.state[0].offset;
  float* moving_var = state + l.state[1].offset;
  std::vector<float> var(C);
  if (options.training && l.trainable) {  // a frozen BatchNormalization runs as in inference
    const double count = static_cast<double>(rows) * positions;
    std::vector<double> mean(C, 0.0), sq(C, 0.0);
    for (int pass = 0; pass < 2; ++pass) {
      ForRows([&](int, int r0, int r1) {
        for (int r = r0; r < r1; ++r) {
          ChannelSums(in.out.data() + r * in.size, positions, C, pass == 0 ? nullptr : mean.data(),
                      row_stats.data() + static_cast<size_t>(r) * C);
        }
      });
      std::vector<double>& total = pass == 0 ? mean : sq;
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < C; ++c) total[c] += row_stats[static_cast<size_t>(r) * C + c];
      }
      for (int c = 0; c < C; ++c) total[c] /= count;
    }
    const float keep = static_cast<float>(l.momentum);
    const float take = static_cast<float>(1.0 - l.momentum);
    for (int c = 0; c < C; ++c) {
      n.mean[c] = static_cast<float>(mean[c]);
      var[c] = static_cast<float>(sq[c]);
      if (options.update_state) {
        moving_mean[c] = moving_mean[c] * keep + n.mean[c] * take;
        moving_var[c] = moving_var[c] * keep + var[c] * take;
      }
    }
  } else {
    std::copy(moving_mean, moving_mean + C, n.mean.begin());
    std::copy(moving_var, moving_var + C, var.begin());
  }
  std::vector<float> shift(C);
  for (int c = 0; c < C; ++c) {
    n.invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c] + l.epsilon)));
    n.inv[c] = gamma != nullptr ? n.invstd[c] * gamma[c] : n.invstd[c];
    shift[c] = (beta != nullptr ? beta[c] : 0.0f) - n.mean[c] * n.inv[c];
  }
  ForRows([&](int, int r0, int r1) {
    const float* __restrict__ inv = n.inv.data();
    const float* __restrict__ add = shift.data();
    for (int r = r0; r < r1; ++r) {
      const float* __restrict__ x = in.out.data() + r * in.size;
      float* __restrict__ y = n.out.data() + r * n.size;
      for (size_t p = 0; p < positions; ++p) {
        for (int c = 0; c < C; ++c) y[p * C + c] = x[p * C + c] * inv[c] + add[c];
      }
    }
  });
}

// d beta = sum dy, d gamma = sum dy * xhat (xhat = (x - mean) * invstd), per row in double
// then over rows in order. Training: dx = inv / M * (M dy - d beta - xhat d gamma), through
// the batch's statistics, computed as inv dy - (a + b (x - mean)) with a = inv d beta / M and
// b = inv invstd d gamma / M; inference: dx = inv dy.
void CpuEngine::Plan::BatchNormBackward(Node& n, float* grad_out) {
  const Layer& l = *n.layer;
  const Node& in = nodes[l.inputs[0]];
  const int C = l.out.c;
  const size_t positions = n.size / C;
  ForRows([&](int, int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      BatchNormSums(in.out.data() + r * in.size, n.dout.data() + r * n.size, positions, C,
                    n.mean.data(), n.invstd.data(),
                    row_stats.data() + static_cast<size_t>(r) * 2 * C);
    }
  });
  std::vector<double> dbeta(C, 0.0), dgamma(C, 0.0);
  for (int r = 0; r < rows; ++r) {
    const double* s = row_stats.data() + static_cast<size_t>(r) * 2 * C;
    for (int c = 0; c < C; ++c) {
      dbeta[c] += s[c];
      dgamma[c] += s[C + c];
    }
  }
  if (l.gamma >= 0) {
    float* g = grad_out + l.params[l.gamma].offset;
    for (int c = 0; c < C; ++c) g[c] = static_cast<float>(dgamma[c]);
  }
  if (l.beta >= 0) {
    float* b = grad_out + l.params[l.beta].offset;
    for (int c = 0; c < C; ++c) b[c] = static_cast<float>(dbeta[c]);
  }
  const double count = static_cast<double>(rows) * positions;
  std::vector<float> a(C, 0.0f), b(C, 0.0f);
  for (int c = 0; c < C && options.training && l.trainable; ++c) {
    a[c] = static_cast<float>(n.inv[c] * dbeta[c] / count);
    b[c] = static_cast<float>(static_cast<double>(n.inv[c]) * n.invstd[c] * dgamma[c] / count);
  }
  ForRows([&](int, int r0, int r1) {
    float* dx = GradTarget(l.inputs[0], r0, r1);
    if (dx == nullptr) return;
    const float* __restrict__ inv = n.inv.data();
    const float* __restrict__ mean = n.mean.data();
    for (int r = r0; r < r1; ++r) {
      const float* __restrict__ x = in.out.data() + r * in.size;
      const float* __restrict__ dy = n.dout.data() + r * n.size;
      float* __restrict__ target = dx + r * in.size;
      for (size_t p = 0; p < positions; ++p) {
        for (int c = 0; c < C; ++c) {
          const size_t i = p * C + c;
          target[i] += inv[c] * dy[i] - (a[c] + b[c] * (x[i] - mean[c]));
        }
      }
    }
  });
  MarkContributed(n);
}

// The built-in model's fused kernel: conv (28x28x1 -> 26x26x32) + ReLU + 2x2 max-pool.
void CpuEngine::Plan::SeedsConvPoolForward(Node& p) {
  const Layer& conv = graph.layers[p.fused_conv];
  const Node& in = nodes[conv.inputs[0]];
  const float* kernel = Param(conv, conv.kernel);
  const float* bias = Param(conv, conv.bias);
  ForRows([&](int, int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      kernels.conv_relu_pool_forward(in.out.data() + r * in.size, kernel, bias,
                                     p.out.data() + r * p.size, p.winners.data() + r * p.size);
    }
  });
}

void CpuEngine::Plan::SeedsConvPoolBackward(Node& p, float* grad_out) {
  const Layer& conv = graph.layers[p.fused_conv];
  const Node& in = nodes[conv.inputs[0]];
  constexpr size_t kStride = 9 * 32 + 32;
  const float* kernel = Param(conv, conv.kernel);
  ForRows([&](int, int r0, int r1) {
    float* dx = GradTarget(conv.inputs[0], r0, r1);
    for (int r = r0; r < r1; ++r) {
      // The pooled gradient, zero where the pooled ReLU output is 0 (as the kernel expects).
      float* g = p.dout.data() + r * p.size;
      const float* pooled = p.out.data() + r * p.size;
      for (size_t i = 0; i < p.size; ++i) g[i] = pooled[i] > 0.0f ? g[i] : 0.0f;
      const float* image = in.out.data() + r * in.size;
      const uint8_t* winners = p.winners.data() + r * p.size;
      float* part = partials.data() + r * kStride;
      kernels.conv_backward_params(image, winners, g, part, part + 9 * 32);
      if (dx == nullptr) continue;
      float* d = dx + r * in.size;
      for (size_t i = 0; i < p.size; ++i) {
        if (g[i] == 0.0f) continue;
        const int c = static_cast<int>(i % 32), cell = static_cast<int>(i / 32);
        const int oy = 2 * (cell / 13) + winners[i] / 2, ox = 2 * (cell % 13) + winners[i] % 2;
        for (int ky = 0; ky < 3; ++ky) {
          for (int kx = 0; kx < 3; ++kx) {
            d[(oy + ky) * 28 + ox + kx] += kernel[(ky * 3 + kx) * 32 + c] * g[i];
          }
        }
      }
    }
  });
  nodes[conv.inputs[0]].accumulate = true;
  // Keras' kernel (3, 3, 1, 32) then its bias (32), adjacent in the layout: the order
  // conv_backward_params writes them in.
  SumRows(
      kStride, kStride, [](size_t e) { return e; }, grad_out + conv.params[conv.kernel].offset);
}

// Input, Rescaling, Activation, pooling, Flatten, Dropout, Add, ZeroPadding2D: row by row.
void CpuEngine::Plan::SimpleForward(Node& n, int index, const Batch& batch) {
  const Layer& l = *n.layer;
  const Window w = WindowOf(l);
  const float* x = l.type == LayerType::kInput ? nullptr : In(n);
  const size_t in_size = l.type == LayerType::kInput ? n.size : nodes[l.inputs[0]].size;
  const bool drop = l.type == LayerType::kDropout && options.training && l.rate > 0.0f;
  const float keep_scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(l.rate)));
  n.masked = drop;
  ForRows([&](int, int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      float* y = n.out.data() + r * n.size;
      const float* xr = x != nullptr ? x + r * in_size : nullptr;
      switch (l.type) {
        case LayerType::kInput:
          std::copy(batch.images + static_cast<size_t>(batch.index[r]) * n.size,
                    batch.images + static_cast<size_t>(batch.index[r] + 1) * n.size, y);
          break;
        case LayerType::kRescaling:
          for (size_t i = 0; i < n.size; ++i) y[i] = xr[i] * l.rescale + l.offset;
          break;
        case LayerType::kActivation:
          Activate(l, xr, y, n.size);
          break;
        case LayerType::kMaxPool:
          kernels::MaxPoolForward(xr, w, y, n.argmax.data() + r * n.size);
          break;
        case LayerType::kAvgPool:
          kernels::AvgPoolForward(xr, w, y);
          break;
        case LayerType::kZeroPadding:
          kernels::ZeroPadForward(xr, w, y);
          break;
        case LayerType::kGlobalAvgPool: {
          const size_t positions = in_size / n.size;
          for (size_t c = 0; c < n.size; ++c) {
            double sum = 0.0;
            for (size_t p = 0; p < positions; ++p) sum += xr[p * n.size + c];
            y[c] = static_cast<float>(sum / static_cast<double>(positions));
          }
          break;
        }
        case LayerType::kFlatten:
          std::copy(xr, xr + n.size, y);
          break;
        case LayerType::kDropout:
          if (!drop) {
            std::copy(xr, xr + n.size, y);
            break;
          }
          {
            SplitMix64 rng(DeriveSeed(DeriveSeed(options.dropout_seed, index), r));
            float* mask = n.mask.data() + r * n.size;
            for (size_t i = 0; i < n.size; ++i) {
              mask[i] = rng.NextFloat() >= l.rate ? keep_scale : 0.0f;
              y[i] = xr[i] * mask[i];
            }
          }
          break;
        case LayerType::kAdd:
          std::copy(xr, xr + n.size, y);
          for (size_t j = 1; j < l.inputs.size(); ++j) {
            AddTo(In(n, static_cast<int>(j)) + r * n.size, y, n.size);
          }
          break;
        default:
          break;
      }
    }
  });
}

void CpuEngine::Plan::SimpleBackward(Node& n) {
  const Layer& l = *n.layer;
  const Window w = WindowOf(l);
  const size_t in_size = nodes[l.inputs[0]].size;
  ForRows([&](int, int r0, int r1) {
    for (size_t j = 0; j < l.inputs.size(); ++j) {
      const auto before = l.inputs.begin() + static_cast<ptrdiff_t>(j);
      const bool first = std::find(l.inputs.begin(), before, l.inputs[j]) == before;
      float* dx = GradTarget(l.inputs[j], r0, r1, first);
      if (dx == nullptr) continue;
      for (int r = r0; r < r1; ++r) {
        const float* dy = n.dout.data() + r * n.size;
        const float* xr = In(n) + r * in_size;
        float* d = dx + r * in_size;
        switch (l.type) {
          case LayerType::kRescaling:
            for (size_t i = 0; i < n.size; ++i) d[i] += dy[i] * l.rescale;
            break;
          case LayerType::kActivation:
            ActivationBackward(l, xr, dy, d, n.size, /*add=*/true);
            break;
          case LayerType::kMaxPool:
            kernels::MaxPoolBackwardAdd(dy, n.argmax.data() + r * n.size, n.size, d);
            break;
          case LayerType::kAvgPool:
            kernels::AvgPoolBackwardAdd(dy, w, d);
            break;
          case LayerType::kZeroPadding:
            kernels::ZeroPadBackwardAdd(dy, w, d);
            break;
          case LayerType::kGlobalAvgPool: {
            const size_t positions = in_size / n.size;
            const float share = static_cast<float>(positions);
            for (size_t p = 0; p < positions; ++p) {
              for (size_t c = 0; c < n.size; ++c) d[p * n.size + c] += dy[c] / share;
            }
            break;
          }
          case LayerType::kDropout:
            if (n.masked) {
              const float* mask = n.mask.data() + r * n.size;
              for (size_t i = 0; i < n.size; ++i) d[i] += dy[i] * mask[i];
              break;
            }
            [[fallthrough]];
          case LayerType::kFlatten:
          case LayerType::kAdd:
            AddTo(dy, d, n.size);
            break;
          default:
            break;
        }
      }
    }
  });
  MarkContributed(n);
}

void CpuEngine::Plan::ForwardLayer(int index, const Batch& batch) {
  Node& n = nodes[index];
  if (n.fused_away) return;
  serial = Work(*n.layer) < kParallelWork;
  if (n.fused_conv >= 0) return SeedsConvPoolForward(n);
  switch (n.layer->type) {
    case LayerType::kConv2D:
      return ConvForward(n);
    case LayerType::kDense:
      return DenseForward(n);
    case LayerType::kDepthwiseConv2D:
      return DepthwiseForward(n);
    case LayerType::kBatchNorm:
      return BatchNormForward(n);
    default:
      return SimpleForward(n, index, batch);
  }
}

void CpuEngine::Plan::BackwardLayer(int index) {
  Node& n = nodes[index];
  if (n.fused_away || n.layer->type == LayerType::kInput) return;
  serial = Work(*n.layer) < kParallelWork;
  if (n.fused_conv >= 0) return SeedsConvPoolBackward(n, grad);
  switch (n.layer->type) {
    case LayerType::kConv2D:
      return ConvBackward(n, grad);
    case LayerType::kDense:
      return DenseBackward(n, grad);
    case LayerType::kDepthwiseConv2D:
      return DepthwiseBackward(n, grad);
    case LayerType::kBatchNorm:
      return BatchNormBackward(n, grad);
    default:
      return SimpleBackward(n);
  }
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

void CpuEngine::Plan::Forward(const Batch& batch, LayerTimes* times) {
  for (int index : graph.order) {
    const auto start = std::chrono::steady_clock::now();
    ForwardLayer(index, batch);
    times->forward[index] += Seconds(start);
  }
}

void CpuEngine::Plan::Backward(LayerTimes* times) {
  for (Node& n : nodes) n.accumulate = false;
  nodes[graph.output].accumulate = true;  // holds d loss / d logits
  for (auto it = graph.order.rbegin(); it != graph.order.rend(); ++it) {
    const auto start = std::chrono::steady_clock::now();
    BackwardLayer(*it);
    times->backward[*it] += Seconds(start);
  }
}

CpuEngine::CpuEngine(const Graph& graph, int max_rows, nn::ThreadPool* pool,
                     const nn::cpu::Kernels& kernels, bool fuse)
    : plan_(std::make_unique<Plan>(graph, std::max(1, max_rows), pool, kernels)) {
  plan_->Build(fuse);
  ResetTimes();
}

CpuEngine::~CpuEngine() = default;

// ---- Label smoothing (SetLabelSmoothing) ----
namespace {

// nn::cpu::SoftmaxCrossEntropy against the smoothed targets t = onehot(label) x (1 - e) + e / K:
// the loss sum_k t_k (lse - z_k) and dlogits = (softmax - t) x scale, the plain one's plus
// e x (onehot - 1 / K) x scale. With e = 0 the plain function's result, bit for bit.
double SmoothedSoftmaxCrossEntropy(const float* logits, int classes, int label, float smoothing,
                                   float scale, float* dlogits, bool* correct) {
  const double loss = nn::cpu::SoftmaxCrossEntropy(logits, classes, label, scale, dlogits, correct);
  if (smoothing == 0.0f) return loss;
  const double e = smoothing;
  const double lse = loss + logits[label];
  double uniform = 0.0;  // sum_k (lse - z_k)
  for (int k = 0; k < classes; ++k) {
    uniform += lse - logits[k];
    const double onehot = k == label ? 1.0 : 0.0;
    dlogits[k] += static_cast<float>(e * (onehot - 1.0 / classes) * scale);
  }
  return (1.0 - e) * loss + e / classes * uniform;
}

}  // namespace
// ---- end of label smoothing ----

bool CpuEngine::fused() const { return plan_->fused; }

void CpuEngine::ResetTimes() {
  times_.forward.assign(plan_->graph.layers.size(), 0.0);
  times_.backward.assign(plan_->graph.layers.size(), 0.0);
}

const float* CpuEngine::Output(int layer) const {
  const Node& n = plan_->nodes[layer];
  return n.fused_away ? nullptr : n.out.data();
}

const float* CpuEngine::InputGradient() const {
  return plan_->nodes[plan_->graph.input].dout.data();
}

nn::BatchStats CpuEngine::ComputeGradients(const float* params, float* state, const Batch& batch,
                                           float scale, float* grad, const StepOptions& options) {
  Plan& p = *plan_;
  p.params = params;
  p.state = state;
  p.options = options;
  p.grad = grad;
  p.rows = batch.rows;
  p.Forward(batch, &times_);
  Node& out = p.nodes[p.graph.output];
  const int classes = p.graph.classes();
  p.serial = true;  // the loss of each row: little work
  p.ForRows([&](int, int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      bool correct = false;
      p.row_loss[r] = SmoothedSoftmaxCrossEntropy(out.out.data() + r * out.size, classes,
                                                  batch.labels[batch.index[r]], label_smoothing_,
                                                  scale, out.dout.data() + r * out.size, &correct);
      p.row_correct[r] = correct;
    }
  });
  p.Backward(&times_);
  nn::BatchStats stats;
  stats.rows = batch.rows;
  for (int r = 0; r < batch.rows; ++r) {
    stats.loss_sum += p.row_loss[r];
    stats.correct += p.row_correct[r];
  }
  return stats;
}

nn::BatchStats CpuEngine::Evaluate(const float* params, const float* state, const Batch& batch,
                                   nn::BatchStats sums) {
  Plan& p = *plan_;
  p.params = params;
  p.state = const_cast<float*>(state);  // NOLINT: inference never writes the state
  p.options = StepOptions{};
  p.options.training = false;
  p.options.update_state = false;
  nn::BatchStats stats = sums;
  Node& out = p.nodes[p.graph.output];
  const int classes = p.graph.classes();
  for (int start = 0; start < batch.rows; start += p.max_rows) {
    Batch chunk = batch;
    chunk.index = batch.index + start;
    chunk.rows = std::min(p.max_rows, batch.rows - start);
    p.rows = chunk.rows;
    p.Forward(chunk, &times_);
    p.serial = true;
    p.ForRows([&](int, int r0, int r1) {
      for (int r = r0; r < r1; ++r) {
        bool correct = false;
        p.row_loss[r] = SmoothedSoftmaxCrossEntropy(out.out.data() + r * out.size, classes,
                                                    chunk.labels[chunk.index[r]], label_smoothing_,
                                                    1.0f, out.dout.data() + r * out.size, &correct);
        p.row_correct[r] = correct;
      }
    });
    for (int r = 0; r < chunk.rows; ++r) {
      stats.loss_sum += p.row_loss[r];
      stats.correct += p.row_correct[r];
    }
    stats.rows += chunk.rows;
  }
  return stats;
}

}  // namespace tj::model
