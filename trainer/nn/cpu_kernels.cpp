#include "trainer/nn/cpu_kernels.h"

#include <cmath>
#include <cstring>

#include "trainer/nn/model.h"

namespace tj::nn::cpu {
namespace {

using v16 = float __attribute__((vector_size(64)));
using i16 = int32_t __attribute__((vector_size(64)));

inline v16 Load(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void Store(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }
inline v16 Splat(float x) { return v16{} + x; }
// Lane sum in a fixed tree order.
inline float HSum(v16 v) {
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = v[i] + v[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}
inline v16 Max0(v16 v) {
  i16 pos = v > 0.0f;
  return pos ? v : v16{};  // NOLINT: vector select
}

}  // namespace

void ConvReluPoolForward(const float* image, const float* kernel, const float* bias, float* pooled,
                         uint8_t* argmax) {
  static_assert(kConvChannels == 32);
  v16 w[9][2];
  for (int t = 0; t < 9; ++t) {
    w[t][0] = Load(kernel + t * 32);
    w[t][1] = Load(kernel + t * 32 + 16);
  }
  const v16 b0 = Load(bias), b1 = Load(bias + 16);
  for (int py = 0; py < kPoolOut; ++py) {
    for (int px = 0; px < kPoolOut; ++px) {
      v16 best0{}, best1{};
      i16 arg0{}, arg1{};
      for (int d = 0; d < 4; ++d) {
        const int oy = 2 * py + (d >> 1), ox = 2 * px + (d & 1);
        v16 a0 = b0, a1 = b1;
        for (int ky = 0; ky < 3; ++ky) {
          const float* row = image + (oy + ky) * 28 + ox;
          for (int kx = 0; kx < 3; ++kx) {
            v16 xv = Splat(row[kx]);
            a0 += xv * w[ky * 3 + kx][0];
            a1 += xv * w[ky * 3 + kx][1];
          }
        }
        if (d == 0) {
          best0 = a0;
          best1 = a1;
        } else {
          i16 m0 = a0 > best0, m1 = a1 > best1;  // first maximum wins ties
          best0 = m0 ? a0 : best0;
          best1 = m1 ? a1 : best1;
          arg0 = m0 ? i16{} + d : arg0;
          arg1 = m1 ? i16{} + d : arg1;
        }
      }
      const int cell = (py * kPoolOut + px) * 32;
      Store(pooled + cell, Max0(best0));
      Store(pooled + cell + 16, Max0(best1));
      for (int c = 0; c < 16; ++c) {
        argmax[cell + c] = static_cast<uint8_t>(arg0[c]);
        argmax[cell + 16 + c] = static_cast<uint8_t>(arg1[c]);
      }
    }
  }
}

void ConvBackwardParams(const float* image, const uint8_t* argmax, const float* dpooled,
                        float* dkernel, float* dbias) {
  v16 dw[9][2] = {};
  v16 db0{}, db1{};
  for (int py = 0; py < kPoolOut; ++py) {
    for (int px = 0; px < kPoolOut; ++px) {
      const int cell = (py * kPoolOut + px) * 32;
      const v16 g0 = Load(dpooled + cell), g1 = Load(dpooled + cell + 16);
      db0 += g0;
      db1 += g1;
      i16 a0, a1;
      for (int c = 0; c < 16; ++c) {
        a0[c] = argmax[cell + c];
        a1[c] = argmax[cell + 16 + c];
      }
      for (int d = 0; d < 4; ++d) {
        const v16 gd0 = (a0 == d) ? g0 : v16{};
        const v16 gd1 = (a1 == d) ? g1 : v16{};
        const int oy = 2 * py + (d >> 1), ox = 2 * px + (d & 1);
        for (int ky = 0; ky < 3; ++ky) {
          const float* row = image + (oy + ky) * 28 + ox;
          for (int kx = 0; kx < 3; ++kx) {
            v16 xv = Splat(row[kx]);
            dw[ky * 3 + kx][0] += xv * gd0;
            dw[ky * 3 + kx][1] += xv * gd1;
          }
        }
      }
    }
  }
  for (int t = 0; t < 9; ++t) {
    Store(dkernel + t * 32, dw[t][0]);
    Store(dkernel + t * 32 + 16, dw[t][1]);
  }
  Store(dbias, db0);
  Store(dbias + 16, db1);
}

namespace {

// R rows x OB outputs of Y, dot products over K.
template <int R, int OB>
inline void DotBlock(const float* X, int K, const float* W, const float* bias, bool relu,
                     int outputs, float* Y, int r0, int o0) {
  v16 acc[R][OB] = {};
  for (int k = 0; k < K; k += 16) {
    v16 x[R], w[OB];
    for (int r = 0; r < R; ++r) x[r] = Load(X + static_cast<size_t>(r0 + r) * K + k);
    for (int o = 0; o < OB; ++o) w[o] = Load(W + static_cast<size_t>(o0 + o) * K + k);
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < OB; ++o) acc[r][o] += x[r] * w[o];
  }
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < OB; ++o) {
      float y = HSum(acc[r][o]) + bias[o0 + o];
      if (relu && !(y > 0.0f)) y = 0.0f;
      Y[static_cast<size_t>(r0 + r) * outputs + o0 + o] = y;
    }
  }
}

template <int R>
inline void DotRows(const float* X, int K, const float* W, const float* bias, bool relu,
                    int outputs, float* Y, int r0) {
  int o = 0;
  for (; o + 4 <= outputs; o += 4) DotBlock<R, 4>(X, K, W, bias, relu, outputs, Y, r0, o);
  for (; o < outputs; ++o) DotBlock<R, 1>(X, K, W, bias, relu, outputs, Y, r0, o);
}

}  // namespace

void DenseForward(const float* X, int rows, int K, const float* W, const float* bias, int outputs,
                  bool relu, float* Y) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) DotRows<4>(X, K, W, bias, relu, outputs, Y, r);
  for (; r < rows; ++r) DotRows<1>(X, K, W, bias, relu, outputs, Y, r);
}

namespace {

// R rows x 32 columns of dX: sum over outputs in order.
template <int R>
inline void AxpyBlock(const float* dY, int outputs, const float* W, int K, const float* mask,
                      float* dX, int r0, int k) {
  v16 acc[R][2] = {};
  for (int o = 0; o < outputs; ++o) {
    const v16 w0 = Load(W + static_cast<size_t>(o) * K + k),
              w1 = Load(W + static_cast<size_t>(o) * K + k + 16);
    for (int r = 0; r < R; ++r) {
      const v16 s = Splat(dY[static_cast<size_t>(r0 + r) * outputs + o]);
      acc[r][0] += s * w0;
      acc[r][1] += s * w1;
    }
  }
  for (int r = 0; r < R; ++r) {
    float* out = dX + static_cast<size_t>(r0 + r) * K + k;
    if (mask != nullptr) {
      const float* m = mask + static_cast<size_t>(r0 + r) * K + k;
      i16 on0 = Load(m) > 0.0f, on1 = Load(m + 16) > 0.0f;
      acc[r][0] = on0 ? acc[r][0] : v16{};
      acc[r][1] = on1 ? acc[r][1] : v16{};
    }
    Store(out, acc[r][0]);
    Store(out + 16, acc[r][1]);
  }
}

}  // namespace

void DenseBackwardInput(const float* dY, int rows, int outputs, const float* W, int K,
                        const float* mask, float* dX) {
  int r = 0;
  for (; r + 8 <= rows; r += 8)
    for (int k = 0; k < K; k += 32) AxpyBlock<8>(dY, outputs, W, K, mask, dX, r, k);
  for (; r < rows; ++r)
    for (int k = 0; k < K; k += 32) AxpyBlock<1>(dY, outputs, W, K, mask, dX, r, k);
}

namespace {

// OB outputs x 32 columns of dW: sum over rows in order.
template <int OB>
inline void OuterBlock(const float* dY, int rows, int outputs, const float* X, int K, float* dW,
                       int o0, int k) {
  v16 acc[OB][2] = {};
  for (int r = 0; r < rows; ++r) {
    const v16 x0 = Load(X + static_cast<size_t>(r) * K + k),
              x1 = Load(X + static_cast<size_t>(r) * K + k + 16);
    const float* g = dY + static_cast<size_t>(r) * outputs + o0;
    for (int o = 0; o < OB; ++o) {
      const v16 s = Splat(g[o]);
      acc[o][0] += s * x0;
      acc[o][1] += s * x1;
    }
  }
  for (int o = 0; o < OB; ++o) {
    Store(dW + static_cast<size_t>(o0 + o) * K + k, acc[o][0]);
    Store(dW + static_cast<size_t>(o0 + o) * K + k + 16, acc[o][1]);
  }
}

}  // namespace

void DenseBackwardWeights(const float* dY, int rows, int outputs, const float* X, int K,
                          int o_begin, int o_end, float* dW) {
  int o = o_begin;
  for (; o + 8 <= o_end; o += 8)
    for (int k = 0; k < K; k += 32) OuterBlock<8>(dY, rows, outputs, X, K, dW, o, k);
  for (; o < o_end; ++o)
    for (int k = 0; k < K; k += 32) OuterBlock<1>(dY, rows, outputs, X, K, dW, o, k);
}

double SoftmaxCrossEntropy(const float* logits, int classes, int label, float scale, float* dlogits,
                           bool* correct) {
  int best = 0;
  for (int i = 1; i < classes; ++i)
    if (logits[i] > logits[best]) best = i;
  const double m = logits[best];
  double sum = 0.0;
  for (int i = 0; i < classes; ++i) sum += std::exp(static_cast<double>(logits[i]) - m);
  const double lse = m + std::log(sum);
  for (int i = 0; i < classes; ++i) {
    double p = std::exp(static_cast<double>(logits[i]) - lse);
    dlogits[i] = static_cast<float>((p - (i == label ? 1.0 : 0.0)) * scale);
  }
  *correct = best == label;
  return lse - logits[label];
}

}  // namespace tj::nn::cpu
