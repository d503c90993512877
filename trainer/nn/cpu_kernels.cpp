// The kernels of cpu_kernels.h, written once with Highway's portable vector operations and
// compiled once per SIMD target: foreach_target.h includes this file again for every target,
// each time inside a namespace of its own (N_AVX3, N_AVX2, N_SSE4, N_NEON, N_EMU128). The part
// under HWY_ONCE, compiled once, lists those tables and picks one.
//
// Every multiply-add the kernels mean to fuse is an explicit MulAdd (the library compiles with
// -ffp-contract=off): the arithmetic of a target is the code's, not the compiler's choice.
// Register blocks are sized to the target's vector registers (32 on AVX-512 and on arm64, 16
// otherwise) so that no accumulator spills.

// The targets: AVX-512 (AVX3), AVX2+FMA, SSE4 and the portable EMU128 on x86-64, NEON and EMU128
// on arm64. The others Highway knows add nothing here: SSSE3 lacks SSE4's blends; SVE's vectors
// can be wider than the 32 floats a block is built on; the AVX-512 flavours above AVX3 (bits 0
// to 7: AVX3_DL, and AVX3_ZEN4 and AVX3_SPR in newer Highway) use nothing AVX3 lacks for these
// kernels, and their CPUs run AVX3.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | ((1LL << 8) - 1))
#endif
// Every attainable target, the portable one included (by default Highway leaves out the targets
// below the compile flags' baseline): TJ_CPU_TARGET=scalar and the tests need it.
#ifndef HWY_COMPILE_ALL_ATTAINABLE
#define HWY_COMPILE_ALL_ATTAINABLE
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "trainer/nn/cpu_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h must come first.
#include <hwy/highway.h>

#include <cstring>

#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/model.h"

HWY_BEFORE_NAMESPACE();
namespace tj::nn::cpu {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
using DI = hn::Rebind<int32_t, D>;
using DU8 = hn::Rebind<uint8_t, D>;

constexpr int kLanes = static_cast<int>(hn::MaxLanes(D()));
static_assert(kConvChannels % kLanes == 0 && 32 % (2 * kLanes) == 0,
              "a target's vectors must divide the 32 conv channels and the 32-column blocks");

#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || HWY_ARCH_ARM_A64
constexpr int kRegisters = 32;
#else
constexpr int kRegisters = 16;
#endif

#if HWY_TARGET == HWY_AVX3
constexpr const char* kTargetName = "avx512";
#elif HWY_TARGET == HWY_AVX2
constexpr const char* kTargetName = "avx2";
#elif HWY_TARGET == HWY_SSE4
constexpr const char* kTargetName = "sse4";
#elif HWY_TARGET == HWY_NEON
constexpr const char* kTargetName = "neon";
#elif HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
constexpr const char* kTargetName = "scalar";
#else
#error "a Highway target this file does not name: add it to HWY_DISABLED_TARGETS or name it"
#endif

// ---- Conv + ReLU + max-pool.

constexpr int kChannelVectors = kConvChannels / kLanes;  // 2, 4 or 8
// Channel vectors done together: best, winner and accumulator of each must stay in registers.
constexpr int kConvGroup = kRegisters == 32 ? kChannelVectors : HWY_MIN(kChannelVectors, 4);

void ConvReluPoolForward(const float* HWY_RESTRICT image, const float* HWY_RESTRICT kernel,
                         const float* HWY_RESTRICT bias, float* HWY_RESTRICT pooled,
                         uint8_t* HWY_RESTRICT argmax) {
  const D d;
  const DI di;
  const DU8 du8;
  const V zero = hn::Zero(d);
  for (int py = 0; py < kPoolOut; ++py) {
    for (int px = 0; px < kPoolOut; ++px) {
      const int cell = (py * kPoolOut + px) * kConvChannels;
      for (int c0 = 0; c0 < kConvChannels; c0 += kConvGroup * kLanes) {
        V best[kConvGroup], winner[kConvGroup];
        for (int g = 0; g < kConvGroup; ++g) best[g] = winner[g] = zero;
        for (int pos = 0; pos < 4; ++pos) {
          const int oy = 2 * py + (pos >> 1), ox = 2 * px + (pos & 1);
          V acc[kConvGroup];
          for (int g = 0; g < kConvGroup; ++g) acc[g] = hn::LoadU(d, bias + c0 + g * kLanes);
          for (int ky = 0; ky < 3; ++ky) {
            const float* row = image + (oy + ky) * 28 + ox;
            for (int kx = 0; kx < 3; ++kx) {
              const V x = hn::Set(d, row[kx]);
              const float* w = kernel + (ky * 3 + kx) * kConvChannels + c0;
              for (int g = 0; g < kConvGroup; ++g) {
                acc[g] = hn::MulAdd(x, hn::LoadU(d, w + g * kLanes), acc[g]);
              }
            }
          }
          for (int g = 0; g < kConvGroup; ++g) {
            if (pos == 0) {
              best[g] = acc[g];
            } else {
              const auto better = hn::Gt(acc[g], best[g]);  // the first maximum wins ties
              best[g] = hn::IfThenElse(better, acc[g], best[g]);
              winner[g] = hn::IfThenElse(better, hn::Set(d, static_cast<float>(pos)), winner[g]);
            }
          }
        }
        for (int g = 0; g < kConvGroup; ++g) {
          const int c = cell + c0 + g * kLanes;
          hn::StoreU(hn::IfThenElseZero(hn::Gt(best[g], zero), best[g]), d, pooled + c);
          hn::StoreU(hn::DemoteTo(du8, hn::ConvertTo(di, winner[g])), du8, argmax + c);
        }
      }
    }
  }
}

// One channel vector at a time: its 9 kernel taps and the bias accumulate in registers over
// every cell, in cell order.
void ConvBackwardParams(const float* HWY_RESTRICT image, const uint8_t* HWY_RESTRICT argmax,
                        const float* HWY_RESTRICT dpooled, float* HWY_RESTRICT dkernel,
                        float* HWY_RESTRICT dbias) {
  const D d;
  const DI di;
  const DU8 du8;
  for (int c = 0; c < kConvChannels; c += kLanes) {
    V dw[9];
    for (V& v : dw) v = hn::Zero(d);
    V db = hn::Zero(d);
    for (int py = 0; py < kPoolOut; ++py) {
      for (int px = 0; px < kPoolOut; ++px) {
        const int cell = (py * kPoolOut + px) * kConvChannels + c;
        const V g = hn::LoadU(d, dpooled + cell);
        db = hn::Add(db, g);
        const V winner = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(du8, argmax + cell)));
        for (int pos = 0; pos < 4; ++pos) {
          const V gd = hn::IfThenElseZero(hn::Eq(winner, hn::Set(d, static_cast<float>(pos))), g);
          const int oy = 2 * py + (pos >> 1), ox = 2 * px + (pos & 1);
          for (int ky = 0; ky < 3; ++ky) {
            const float* row = image + (oy + ky) * 28 + ox;
            for (int kx = 0; kx < 3; ++kx) {
              dw[ky * 3 + kx] = hn::MulAdd(hn::Set(d, row[kx]), gd, dw[ky * 3 + kx]);
            }
          }
        }
      }
    }
    for (int t = 0; t < 9; ++t) hn::StoreU(dw[t], d, dkernel + t * kConvChannels + c);
    hn::StoreU(db, d, dbias + c);
  }
}

// ---- Dense layers. Every output element is one accumulator summed in a fixed order (over k,
// over o or over r), so how rows or outputs are blocked never changes a bit.

// R rows x OB outputs of Y, dot products over K.
template <int R, int OB>
HWY_INLINE void DotBlock(const float* HWY_RESTRICT X, int K, const float* HWY_RESTRICT W,
                         const float* HWY_RESTRICT bias, bool relu, int outputs,
                         float* HWY_RESTRICT Y, int r0, int o0) {
  const D d;
  V acc[R][OB];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < OB; ++o) acc[r][o] = hn::Zero(d);
  for (int k = 0; k < K; k += kLanes) {
    V x[R];
    for (int r = 0; r < R; ++r) x[r] = hn::LoadU(d, X + static_cast<size_t>(r0 + r) * K + k);
    for (int o = 0; o < OB; ++o) {
      const V w = hn::LoadU(d, W + static_cast<size_t>(o0 + o) * K + k);
      for (int r = 0; r < R; ++r) acc[r][o] = hn::MulAdd(x[r], w, acc[r][o]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < OB; ++o) {
      float y = hn::GetLane(hn::SumOfLanes(d, acc[r][o])) + bias[o0 + o];
      if (relu && !(y > 0.0f)) y = 0.0f;
      Y[static_cast<size_t>(r0 + r) * outputs + o0 + o] = y;
    }
  }
}

template <int R>
HWY_INLINE void DotRows(const float* X, int K, const float* W, const float* bias, bool relu,
                        int outputs, float* Y, int r0) {
  int o = 0;
  for (; o + 4 <= outputs; o += 4) DotBlock<R, 4>(X, K, W, bias, relu, outputs, Y, r0, o);
  for (; o < outputs; ++o) DotBlock<R, 1>(X, K, W, bias, relu, outputs, Y, r0, o);
}

constexpr int kDotRows = kRegisters == 32 ? 4 : 2;

void DenseForward(const float* X, int rows, int K, const float* W, const float* bias, int outputs,
                  bool relu, float* Y) {
  int r = 0;
  for (; r + kDotRows <= rows; r += kDotRows) DotRows<kDotRows>(X, K, W, bias, relu, outputs, Y, r);
  for (; r < rows; ++r) DotRows<1>(X, K, W, bias, relu, outputs, Y, r);
}

constexpr int kColumns = 2 * kLanes;  // columns of dX or dW one block computes

// R rows x kColumns columns of dX: sums over the outputs in order.
template <int R>
HWY_INLINE void AxpyBlock(const float* HWY_RESTRICT dY, int outputs, const float* HWY_RESTRICT W,
                          int K, const float* HWY_RESTRICT mask, float* HWY_RESTRICT dX, int r0,
                          int k) {
  const D d;
  V acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = hn::Zero(d);
  for (int o = 0; o < outputs; ++o) {
    const float* w = W + static_cast<size_t>(o) * K + k;
    const V w0 = hn::LoadU(d, w), w1 = hn::LoadU(d, w + kLanes);
    for (int r = 0; r < R; ++r) {
      const V s = hn::Set(d, dY[static_cast<size_t>(r0 + r) * outputs + o]);
      acc[r][0] = hn::MulAdd(s, w0, acc[r][0]);
      acc[r][1] = hn::MulAdd(s, w1, acc[r][1]);
    }
  }
  const V zero = hn::Zero(d);
  for (int r = 0; r < R; ++r) {
    float* out = dX + static_cast<size_t>(r0 + r) * K + k;
    if (mask != nullptr) {
      const float* m = mask + static_cast<size_t>(r0 + r) * K + k;
      acc[r][0] = hn::IfThenElseZero(hn::Gt(hn::LoadU(d, m), zero), acc[r][0]);
      acc[r][1] = hn::IfThenElseZero(hn::Gt(hn::LoadU(d, m + kLanes), zero), acc[r][1]);
    }
    hn::StoreU(acc[r][0], d, out);
    hn::StoreU(acc[r][1], d, out + kLanes);
  }
}

constexpr int kAxpyRows = kRegisters == 32 ? 8 : 4;

// Column blocks outside, rows inside: W's block of columns (outputs x kColumns) stays in the
// L1 cache while every row passes over it.
void DenseBackwardInput(const float* dY, int rows, int outputs, const float* W, int K,
                        const float* mask, float* dX) {
  for (int k = 0; k < K; k += kColumns) {
    int r = 0;
    for (; r + kAxpyRows <= rows; r += kAxpyRows) {
      AxpyBlock<kAxpyRows>(dY, outputs, W, K, mask, dX, r, k);
    }
    for (; r < rows; ++r) AxpyBlock<1>(dY, outputs, W, K, mask, dX, r, k);
  }
}

// OB outputs x kColumns columns of dW: sums over the rows in order.
template <int OB>
HWY_INLINE void OuterBlock(const float* HWY_RESTRICT dY, int rows, int outputs,
                           const float* HWY_RESTRICT X, int K, float* HWY_RESTRICT dW, int o0,
                           int k) {
  const D d;
  V acc[OB][2];
  for (int o = 0; o < OB; ++o) acc[o][0] = acc[o][1] = hn::Zero(d);
  for (int r = 0; r < rows; ++r) {
    const float* x = X + static_cast<size_t>(r) * K + k;
    const V x0 = hn::LoadU(d, x), x1 = hn::LoadU(d, x + kLanes);
    const float* g = dY + static_cast<size_t>(r) * outputs + o0;
    for (int o = 0; o < OB; ++o) {
      const V s = hn::Set(d, g[o]);
      acc[o][0] = hn::MulAdd(s, x0, acc[o][0]);
      acc[o][1] = hn::MulAdd(s, x1, acc[o][1]);
    }
  }
  for (int o = 0; o < OB; ++o) {
    hn::StoreU(acc[o][0], d, dW + static_cast<size_t>(o0 + o) * K + k);
    hn::StoreU(acc[o][1], d, dW + static_cast<size_t>(o0 + o) * K + k + kLanes);
  }
}

constexpr int kOuterOutputs = kRegisters == 32 ? 8 : 4;

// Column blocks outside, outputs inside: X's block of columns (rows x kColumns) stays in the
// L1 cache while every output passes over it.
void DenseBackwardWeights(const float* dY, int rows, int outputs, const float* X, int K,
                          int o_begin, int o_end, float* dW) {
  for (int k = 0; k < K; k += kColumns) {
    int o = o_begin;
    for (; o + kOuterOutputs <= o_end; o += kOuterOutputs) {
      OuterBlock<kOuterOutputs>(dY, rows, outputs, X, K, dW, o, k);
    }
    for (; o < o_end; ++o) OuterBlock<1>(dY, rows, outputs, X, K, dW, o, k);
  }
}

// ---- Adam. The last partial vector goes through the same lanes' arithmetic, copied to and from
// a full vector on the stack (Highway's masked loads and stores may touch the whole vector, which
// can fault past the end and race with the thread that owns the next elements), so an element's
// result does not depend on where a thread's range ends.
void AdamUpdate(float* HWY_RESTRICT w, const float* HWY_RESTRICT g, float* HWY_RESTRICT m,
                float* HWY_RESTRICT v, int n, float alpha, float one_minus_b1, float one_minus_b2,
                float eps) {
  const D d;
  const V a = hn::Set(d, alpha), b1 = hn::Set(d, one_minus_b1), b2 = hn::Set(d, one_minus_b2),
          e = hn::Set(d, eps);
  auto update = [&](float* wp, const float* gp, float* mp, float* vp) {
    const V gi = hn::LoadU(d, gp);
    const V mi = hn::MulAdd(hn::Sub(gi, hn::LoadU(d, mp)), b1, hn::LoadU(d, mp));
    const V vi = hn::MulAdd(hn::Sub(hn::Mul(gi, gi), hn::LoadU(d, vp)), b2, hn::LoadU(d, vp));
    hn::StoreU(mi, d, mp);
    hn::StoreU(vi, d, vp);
    hn::StoreU(hn::Sub(hn::LoadU(d, wp), hn::Div(hn::Mul(a, mi), hn::Add(hn::Sqrt(vi), e))), d, wp);
  };
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) update(w + i, g + i, m + i, v + i);
  if (i < n) {
    HWY_ALIGN float tw[kLanes] = {}, tg[kLanes] = {}, tm[kLanes] = {}, tv[kLanes] = {};
    const size_t rest = sizeof(float) * static_cast<size_t>(n - i);
    std::memcpy(tw, w + i, rest);
    std::memcpy(tg, g + i, rest);
    std::memcpy(tm, m + i, rest);
    std::memcpy(tv, v + i, rest);
    update(tw, tg, tm, tv);
    std::memcpy(w + i, tw, rest);
    std::memcpy(m + i, tm, rest);
    std::memcpy(v + i, tv, rest);
  }
}

// ---- A general matrix product, columns along the lanes. Each C element is one accumulator
// (from 0, or from C's value when accumulating) summed over k in order, then the bias added
// and the clamp applied, whatever the block it falls in: the rows a caller passes, and how the
// blocks split them, never change a bit.

// R rows x NB vectors of C from column n. A column block past N (the last vector of a row
// whose N is not a multiple of the lanes) is loaded and stored through a copy on the stack,
// so that nothing past N is read from or written to C.
template <int R, int NB>
HWY_INLINE void GemmBlock(const float* HWY_RESTRICT A, int a_row, int a_col,
                          const float* HWY_RESTRICT B, int ldb, const float* HWY_RESTRICT bias,
                          int K, int N, V lo, V hi, bool accumulate, float* HWY_RESTRICT C, int ldc,
                          int r0, int n) {
  const D d;
  V acc[R][NB];
  HWY_ALIGN float tail[kLanes];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NB; ++j) {
      const int col = n + j * kLanes;
      const float* c = C + static_cast<size_t>(r0 + r) * ldc + col;
      if (!accumulate) {
        acc[r][j] = hn::Zero(d);
      } else if (col + kLanes <= N) {
        acc[r][j] = hn::LoadU(d, c);
      } else {
        std::memcpy(tail, c, sizeof(float) * static_cast<size_t>(N - col));
        acc[r][j] = hn::Load(d, tail);
      }
    }
  }
  const float* a = A + static_cast<size_t>(r0) * a_row;
  for (int k = 0; k < K; ++k) {
    V b[NB];
    for (int j = 0; j < NB; ++j) {
      b[j] = hn::LoadU(d, B + static_cast<size_t>(k) * ldb + n + j * kLanes);
    }
    const float* ak = a + static_cast<size_t>(k) * a_col;
    for (int r = 0; r < R; ++r) {
      const V x = hn::Set(d, ak[static_cast<size_t>(r) * a_row]);
      for (int j = 0; j < NB; ++j) acc[r][j] = hn::MulAdd(x, b[j], acc[r][j]);
    }
  }
  for (int j = 0; j < NB; ++j) {
    const int col = n + j * kLanes;
    const V add = bias != nullptr ? hn::LoadU(d, bias + col) : hn::Zero(d);
    for (int r = 0; r < R; ++r) {
      const V y = bias != nullptr ? hn::Add(acc[r][j], add) : acc[r][j];
      const V z = hn::Min(hn::Max(y, lo), hi);
      float* out = C + static_cast<size_t>(r0 + r) * ldc + col;
      if (col + kLanes <= N) {
        hn::StoreU(z, d, out);
      } else {
        hn::Store(z, d, tail);
        std::memcpy(out, tail, sizeof(float) * static_cast<size_t>(N - col));
      }
    }
  }
}

constexpr int kGemmRows = kRegisters == 32 ? 8 : 4;         // rows of a two-vector block
constexpr int kGemmRowsNarrow = kRegisters == 32 ? 16 : 8;  // rows of a one-vector block

struct GemmArgs {
  const float* A;
  int a_row, a_col;
  const float* B;
  int ldb;
  const float* bias;
  int rows, K, N;
  V lo, hi;
  bool accumulate;
  float* C;
  int ldc;
};

template <int NB, int R>
HWY_INLINE void GemmColumns(const GemmArgs& g, int n) {
  int r = 0;
  for (; r + R <= g.rows; r += R) {
    GemmBlock<R, NB>(g.A, g.a_row, g.a_col, g.B, g.ldb, g.bias, g.K, g.N, g.lo, g.hi, g.accumulate,
                     g.C, g.ldc, r, n);
  }
  for (; r < g.rows; ++r) {
    GemmBlock<1, NB>(g.A, g.a_row, g.a_col, g.B, g.ldb, g.bias, g.K, g.N, g.lo, g.hi, g.accumulate,
                     g.C, g.ldc, r, n);
  }
}

void Gemm(const float* A, int a_row, int a_col, const float* B, int ldb, const float* bias,
          int rows, int K, int N, float lo, float hi, bool accumulate, float* C, int ldc) {
  const D d;
  const GemmArgs g{A, a_row,          a_col,          B,          ldb, bias, rows, K,
                   N, hn::Set(d, lo), hn::Set(d, hi), accumulate, C,   ldc};
  int n = 0;
  for (; n + 2 * kLanes <= N; n += 2 * kLanes) GemmColumns<2, kGemmRows>(g, n);
  for (; n < N; n += kLanes) GemmColumns<1, kGemmRowsNarrow>(g, n);
}

}  // namespace

static_assert(kGemmColumnPad % kLanes == 0, "gemm's column padding must hold whole vectors");

const Kernels kKernels = {
    kTargetName,         &ConvReluPoolForward,  &ConvBackwardParams, &DenseForward,
    &DenseBackwardInput, &DenseBackwardWeights, &AdamUpdate,         &Gemm};

}  // namespace HWY_NAMESPACE
}  // namespace tj::nn::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <cmath>

namespace tj::nn::cpu {
namespace {

struct Compiled {
  int64_t target;  // Highway's bit for it
  const Kernels* kernels;
};

// Best first, as Highway orders its targets.
constexpr Compiled kCompiled[] = {
#if HWY_TARGETS & HWY_AVX3
    {HWY_AVX3, &N_AVX3::kKernels},
#endif
#if HWY_TARGETS & HWY_AVX2
    {HWY_AVX2, &N_AVX2::kKernels},
#endif
#if HWY_TARGETS & HWY_SSE4
    {HWY_SSE4, &N_SSE4::kKernels},
#endif
#if HWY_TARGETS & HWY_NEON
    {HWY_NEON, &N_NEON::kKernels},
#endif
#if HWY_TARGETS & HWY_EMU128
    {HWY_EMU128, &N_EMU128::kKernels},
#endif
#if HWY_TARGETS & HWY_SCALAR
    {HWY_SCALAR, &N_SCALAR::kKernels},
#endif
};

bool Runs(const Compiled& c) {
  return c.target == HWY_EMU128 || c.target == HWY_SCALAR ||
         (hwy::SupportedTargets() & c.target) != 0;
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::vector<std::string> SupportedTargets() {
  std::vector<std::string> names;
  for (const Compiled& c : kCompiled)
    if (Runs(c)) names.emplace_back(c.kernels->target);
  return names;
}

std::vector<std::string> CompiledTargets() {
  std::vector<std::string> names;
  for (const Compiled& c : kCompiled) names.emplace_back(c.kernels->target);
  return names;
}

const Kernels& BestKernels() {
  for (const Compiled& c : kCompiled)
    if (Runs(c)) return *c.kernels;
  return *kCompiled[std::size(kCompiled) - 1].kernels;  // the portable one: always compiled
}

StatusOr<const Kernels*> KernelsFor(std::string_view name) {
  if (name.empty() || name == "auto") return &BestKernels();
  for (const Compiled& c : kCompiled) {
    if (name != c.kernels->target) continue;
    if (Runs(c)) return c.kernels;
    return Status::Error("TJ_CPU_TARGET=" + std::string(name) +
                         ": this CPU cannot run it; it supports " + Join(SupportedTargets()) +
                         " (or auto, the best of them)");
  }
  return Status::Error("TJ_CPU_TARGET=" + std::string(name) + ": unknown CPU target; expected " +
                       "auto or one of " + Join(CompiledTargets()) + " (this CPU supports " +
                       Join(SupportedTargets()) + ")");
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

#endif  // HWY_ONCE
