// Every SIMD target this CPU runs, forced one after the other, against a plain double-precision
// reference of each kernel, within the tolerance docs/trainer.md states: an output may differ
// from the exact value by kRelative x (the sum of its terms' magnitudes) + kAbsolute. And the
// target selection: the names, the errors.
#include "trainer/nn/cpu_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/random.h"
#include "trainer/nn/model.h"

namespace tj::nn::cpu {
namespace {

constexpr double kRelative = 1e-5;
constexpr double kAbsolute = 1e-7;

std::vector<float> Random(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * rng.NextFloat();
  return v;
}

// A value computed in double with the sum of its terms' magnitudes, the scale of its
// rounding error in float.
struct Exact {
  double value = 0.0;
  double magnitude = 0.0;
  void Add(double term) {
    value += term;
    magnitude += std::abs(term);
  }
};

void ExpectNear(float got, const Exact& want, const std::string& what) {
  EXPECT_NEAR(got, want.value, kRelative * want.magnitude + kAbsolute) << what;
}

class EveryTarget : public testing::TestWithParam<std::string> {
 protected:
  const Kernels& k() const { return **KernelsFor(GetParam()); }
};

TEST_P(EveryTarget, NamesItself) { EXPECT_EQ(k().target, GetParam()); }

TEST_P(EveryTarget, ConvReluPoolForward) {
  const std::vector<float> image = Random(784, 1, 0.0f, 1.0f), kernel = Random(288, 2),
                           bias = Random(32, 3, -0.1f, 0.1f);
  std::vector<float> pooled(kFlat);
  std::vector<uint8_t> argmax(kFlat);
  k().conv_relu_pool_forward(image.data(), kernel.data(), bias.data(), pooled.data(),
                             argmax.data());
  int compared_winners = 0;
  for (int py = 0; py < kPoolOut; ++py) {
    for (int px = 0; px < kPoolOut; ++px) {
      for (int c = 0; c < 32; ++c) {
        Exact window[4];
        for (int pos = 0; pos < 4; ++pos) {
          const int oy = 2 * py + pos / 2, ox = 2 * px + pos % 2;
          window[pos].Add(bias[c]);
          for (int t = 0; t < 9; ++t) {
            window[pos].Add(double{image[(oy + t / 3) * 28 + ox + t % 3]} * kernel[t * 32 + c]);
          }
        }
        int best = 0;
        for (int pos = 1; pos < 4; ++pos)
          if (window[pos].value > window[best].value) best = pos;
        const int i = (py * kPoolOut + px) * 32 + c;
        const std::string where = "cell " + std::to_string(i);
        Exact want = window[best];
        if (want.value <= 0) want.value = 0;
        ExpectNear(pooled[i], want, where);
        // The winner where no other window comes within rounding of it.
        double runner_up = -1e30;
        for (int pos = 0; pos < 4; ++pos)
          if (pos != best) runner_up = std::max(runner_up, window[pos].value);
        if (window[best].value - runner_up > 1e-4) {
          EXPECT_EQ(argmax[i], best) << where;
          ++compared_winners;
        }
      }
    }
  }
  EXPECT_GT(compared_winners, kFlat * 9 / 10);
}

TEST_P(EveryTarget, MaxPoolRoutesGradientToTheWinner) {
  // Only pixel (0,0) is lit and the kernel only sees its own tap 0: conv output (0,0) of
  // channel 0 is the single positive value, so pooled cell (0,0) picks window position 0.
  std::vector<float> image(784, 0.0f), kernel(288, 0.0f), bias(32, 0.0f);
  image[0] = 1.0f;
  kernel[0] = 2.0f;
  std::vector<float> pooled(kFlat);
  std::vector<uint8_t> argmax(kFlat);
  k().conv_relu_pool_forward(image.data(), kernel.data(), bias.data(), pooled.data(),
                             argmax.data());
  EXPECT_FLOAT_EQ(pooled[0], 2.0f);
  EXPECT_EQ(argmax[0], 0);
  for (int i = 1; i < kFlat; ++i) ASSERT_EQ(pooled[i], 0.0f) << i;
  std::vector<float> dpooled(kFlat, 0.0f), dk(288), db(32);
  dpooled[0] = 1.0f;
  k().conv_backward_params(image.data(), argmax.data(), dpooled.data(), dk.data(), db.data());
  EXPECT_FLOAT_EQ(dk[0], 1.0f);  // d(out)/d(kernel tap 0) = pixel (0,0) = 1
  EXPECT_FLOAT_EQ(db[0], 1.0f);
  EXPECT_FLOAT_EQ(dk[32], 0.0f);
}

TEST_P(EveryTarget, ConvBackwardParams) {
  const std::vector<float> image = Random(784, 4, 0.0f, 1.0f), dpooled = Random(kFlat, 5);
  std::vector<uint8_t> argmax(kFlat);
  SplitMix64 rng(6);
  for (uint8_t& a : argmax) a = static_cast<uint8_t>(rng.Below(4));
  std::vector<float> dk(288), db(32);
  k().conv_backward_params(image.data(), argmax.data(), dpooled.data(), dk.data(), db.data());
  Exact want_k[288], want_b[32];
  for (int cell = 0; cell < kPoolOut * kPoolOut; ++cell) {
    const int py = cell / kPoolOut, px = cell % kPoolOut;
    for (int c = 0; c < 32; ++c) {
      const int i = cell * 32 + c, pos = argmax[i];
      const int oy = 2 * py + pos / 2, ox = 2 * px + pos % 2;
      want_b[c].Add(dpooled[i]);
      for (int t = 0; t < 9; ++t) {
        want_k[t * 32 + c].Add(double{image[(oy + t / 3) * 28 + ox + t % 3]} * dpooled[i]);
      }
    }
  }
  for (int i = 0; i < 288; ++i) ExpectNear(dk[i], want_k[i], "dkernel " + std::to_string(i));
  for (int c = 0; c < 32; ++c) ExpectNear(db[c], want_b[c], "dbias " + std::to_string(c));
}

// The model's shapes, and row counts that leave every block size a remainder.
struct DenseShape {
  int rows, K, outputs;
};
constexpr DenseShape kShapes[] = {{13, kFlat, kHidden}, {7, kHidden, kClasses}, {1, 64, 3}};

TEST_P(EveryTarget, DenseForward) {
  for (const DenseShape& s : kShapes) {
    const std::vector<float> X = Random(size_t{1} * s.rows * s.K, 7, 0.0f, 1.0f),
                             W = Random(size_t{1} * s.outputs * s.K, 8, -0.05f, 0.05f),
                             bias = Random(s.outputs, 9, -0.1f, 0.1f);
    for (bool relu : {false, true}) {
      std::vector<float> Y(size_t{1} * s.rows * s.outputs);
      k().dense_forward(X.data(), s.rows, s.K, W.data(), bias.data(), s.outputs, relu, Y.data());
      for (int r = 0; r < s.rows; ++r) {
        for (int o = 0; o < s.outputs; ++o) {
          Exact want;
          for (int i = 0; i < s.K; ++i) {
            want.Add(double{X[size_t{1} * r * s.K + i]} * W[size_t{1} * o * s.K + i]);
          }
          want.Add(bias[o]);
          if (relu && want.value <= 0) want.value = 0;
          ExpectNear(Y[size_t{1} * r * s.outputs + o], want,
                     "K " + std::to_string(s.K) + " row " + std::to_string(r) + " output " +
                         std::to_string(o) + (relu ? " relu" : ""));
        }
      }
    }
  }
}

// The general product on shapes with every kind of tail (rows past a block, N past a vector,
// one vector, two), strides wider than the rows, each clamp, with and without a bias; columns
// past N in C are left alone. Each element's sum runs over k in order whatever block it falls
// in, so computing the rows one at a time gives the same bits; A read transposed, and a sum
// split in two with the second half accumulated onto the first, give the same bits too.
TEST_P(EveryTarget, GemmMatchesTheProductAndItsBlocksAgree) {
  struct Shape {
    int rows, K, N;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const std::pair<float, float> clamps[] = {{-inf, inf}, {0.0f, inf}, {0.0f, 0.05f}};
  for (const Shape& s : {Shape{37, 27, 16}, Shape{13, 144, 40}, Shape{5, 9, 8}, Shape{20, 1, 3},
                         Shape{64, 48, 33}}) {
    const int lda = s.K + 3, pad = (s.N + kGemmColumnPad - 1) / kGemmColumnPad * kGemmColumnPad;
    const int ldb = pad + 5, ldc = s.N + 7;
    const std::vector<float> A = Random(size_t{1} * s.rows * lda, 21),
                             B = Random(size_t{1} * s.K * ldb, 22, -0.05f, 0.05f),
                             bias = Random(pad, 23, -0.1f, 0.1f);
    for (const auto& [lo, hi] : clamps) {
      for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
        const std::string what = "rows " + std::to_string(s.rows) + " K " + std::to_string(s.K) +
                                 " N " + std::to_string(s.N) + (b ? " bias" : "") + " clamp " +
                                 std::to_string(lo) + ".." + std::to_string(hi);
        std::vector<float> C(size_t{1} * s.rows * ldc, 7.0f), one(C);
        const float inf = std::numeric_limits<float>::infinity();
        k().gemm(A.data(), lda, 1, B.data(), ldb, b, s.rows, s.K, s.N, lo, hi, false, C.data(),
                 ldc);
        for (int r = 0; r < s.rows; ++r) {
          k().gemm(A.data() + size_t{1} * r * lda, lda, 1, B.data(), ldb, b, 1, s.K, s.N, lo, hi,
                   false, one.data() + size_t{1} * r * ldc, ldc);
        }
        EXPECT_TRUE(C == one) << what << ": a row alone differs";
        // Without bias and clamp: A transposed (K x rows, row stride rows + 2), and in two
        // halves of K, the second accumulated.
        std::vector<float> AT(size_t{1} * s.K * (s.rows + 2));
        for (int r = 0; r < s.rows; ++r) {
          for (int i = 0; i < s.K; ++i) {
            AT[size_t{1} * i * (s.rows + 2) + r] = A[size_t{1} * r * lda + i];
          }
        }
        std::vector<float> plain(C.size(), 7.0f), transposed(plain), halves(plain);
        k().gemm(A.data(), lda, 1, B.data(), ldb, nullptr, s.rows, s.K, s.N, -inf, inf, false,
                 plain.data(), ldc);
        k().gemm(AT.data(), 1, s.rows + 2, B.data(), ldb, nullptr, s.rows, s.K, s.N, -inf, inf,
                 false, transposed.data(), ldc);
        const int half = s.K / 2;
        k().gemm(A.data(), lda, 1, B.data(), ldb, nullptr, s.rows, half, s.N, -inf, inf, false,
                 halves.data(), ldc);
        k().gemm(A.data() + half, lda, 1, B.data() + size_t{1} * half * ldb, ldb, nullptr, s.rows,
                 s.K - half, s.N, -inf, inf, true, halves.data(), ldc);
        EXPECT_TRUE(transposed == plain) << what << ": A transposed differs";
        EXPECT_TRUE(halves == plain) << what << ": accumulating in two halves differs";
        for (int r = 0; r < s.rows; ++r) {
          for (int n = 0; n < ldc; ++n) {
            const float got = C[size_t{1} * r * ldc + n];
            if (n >= s.N) {
              ASSERT_EQ(got, 7.0f) << what << ": wrote past N at row " << r << " column " << n;
              continue;
            }
            Exact want;
            for (int i = 0; i < s.K; ++i) {
              want.Add(double{A[size_t{1} * r * lda + i]} * B[size_t{1} * i * ldb + n]);
            }
            if (b != nullptr) want.Add(b[n]);
            want.value = std::min(std::max(want.value, double{lo}), double{hi});
            ExpectNear(got, want,
                       what + " row " + std::to_string(r) + " column " + std::to_string(n));
          }
        }
      }
    }
  }
}

TEST_P(EveryTarget, DenseBackwardInput) {
  for (const DenseShape& s : kShapes) {
    const std::vector<float> dY = Random(size_t{1} * s.rows * s.outputs, 10),
                             W = Random(size_t{1} * s.outputs * s.K, 11, -0.05f, 0.05f),
                             mask = Random(size_t{1} * s.rows * s.K, 12);
    for (const float* m : {static_cast<const float*>(nullptr), mask.data()}) {
      std::vector<float> dX(size_t{1} * s.rows * s.K);
      k().dense_backward_input(dY.data(), s.rows, s.outputs, W.data(), s.K, m, dX.data());
      for (int r = 0; r < s.rows; ++r) {
        for (int i = 0; i < s.K; ++i) {
          Exact want;
          const size_t at = size_t{1} * r * s.K + i;
          if (m == nullptr || m[at] > 0) {
            for (int o = 0; o < s.outputs; ++o) {
              want.Add(double{dY[size_t{1} * r * s.outputs + o]} * W[size_t{1} * o * s.K + i]);
            }
          }
          ExpectNear(dX[at], want,
                     "K " + std::to_string(s.K) + " row " + std::to_string(r) + " column " +
                         std::to_string(i));
        }
      }
    }
  }
}

TEST_P(EveryTarget, DenseBackwardWeights) {
  for (const DenseShape& s : kShapes) {
    const std::vector<float> dY = Random(size_t{1} * s.rows * s.outputs, 13),
                             X = Random(size_t{1} * s.rows * s.K, 14, 0.0f, 1.0f);
    // A range that starts and ends inside the outputs, as a thread's share does.
    const int o_begin = s.outputs > 8 ? 8 : 0, o_end = s.outputs;
    std::vector<float> dW(size_t{1} * s.outputs * s.K, -7.0f);
    k().dense_backward_weights(dY.data(), s.rows, s.outputs, X.data(), s.K, o_begin, o_end,
                               dW.data());
    for (int o = 0; o < s.outputs; ++o) {
      for (int i = 0; i < s.K; ++i) {
        const float got = dW[size_t{1} * o * s.K + i];
        if (o < o_begin) {
          ASSERT_EQ(got, -7.0f) << "output " << o << " is outside the range and was written";
          continue;
        }
        Exact want;
        for (int r = 0; r < s.rows; ++r) {
          want.Add(double{dY[size_t{1} * r * s.outputs + o]} * X[size_t{1} * r * s.K + i]);
        }
        ExpectNear(got, want,
                   "K " + std::to_string(s.K) + " output " + std::to_string(o) + " column " +
                       std::to_string(i));
      }
    }
  }
}

TEST_P(EveryTarget, AdamUpdateMatchesTheFormulaAndIgnoresWhereARangeEnds) {
  const int n = 101;  // a partial last vector on every target
  const std::vector<float> g = Random(n, 15, -0.01f, 0.01f), w0 = Random(n, 16),
                           m0 = Random(n, 17, -0.001f, 0.001f), v0 = Random(n, 18, 0.0f, 1e-4f);
  const float alpha = 1e-3f, b1 = 0.1f, b2 = 0.001f, eps = 1e-7f;
  std::vector<float> w = w0, m = m0, v = v0;
  k().adam_update(w.data(), g.data(), m.data(), v.data(), n, alpha, b1, b2, eps);
  for (int i = 0; i < n; ++i) {
    // Each within 1e-6 of the magnitudes of the terms it sums.
    const double mi = m0[i] + (double{g[i]} - m0[i]) * b1;
    const double vi = v0[i] + (double{g[i]} * g[i] - v0[i]) * b2;
    const double step = alpha * mi / (std::sqrt(vi) + eps), wi = w0[i] - step;
    EXPECT_NEAR(m[i], mi, 1e-6 * (std::abs(m0[i]) + std::abs(g[i] - m0[i]) * b1)) << i;
    EXPECT_NEAR(v[i], vi, 1e-6 * (std::abs(v0[i]) + (g[i] * g[i] + v0[i]) * b2)) << i;
    EXPECT_NEAR(w[i], wi, 1e-6 * (std::abs(w0[i]) + std::abs(step))) << i;
  }
  // Split in two: the same bits as in one piece, and nothing past the range touched.
  for (int split : {1, 5, 17, 50}) {
    std::vector<float> w2 = w0, m2 = m0, v2 = v0;
    k().adam_update(w2.data(), g.data(), m2.data(), v2.data(), split, alpha, b1, b2, eps);
    for (int i = split; i < n; ++i) {
      ASSERT_TRUE(w2[i] == w0[i] && m2[i] == m0[i] && v2[i] == v0[i])
          << "element " << i << " past a range of " << split << " was written";
    }
    k().adam_update(w2.data() + split, g.data() + split, m2.data() + split, v2.data() + split,
                    n - split, alpha, b1, b2, eps);
    EXPECT_EQ(w2, w) << "split at " << split;
    EXPECT_EQ(m2, m) << "split at " << split;
    EXPECT_EQ(v2, v) << "split at " << split;
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, EveryTarget, testing::ValuesIn(SupportedTargets()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(CpuTargets, TheBestComesFirstAndThePortableOneIsAlwaysThere) {
  const std::vector<std::string> supported = SupportedTargets();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.back(), "scalar");
  EXPECT_EQ(BestKernels().target, supported.front());
  EXPECT_EQ((*KernelsFor(""))->target, supported.front());
  EXPECT_EQ((*KernelsFor("auto"))->target, supported.front());
  for (const std::string& name : supported) {
    EXPECT_NE(std::find(CompiledTargets().begin(), CompiledTargets().end(), name),
              CompiledTargets().end())
        << name;
  }
#if defined(__x86_64__)
  // The x86-64 build's targets, every one of them compiled (the image runs on any of them).
  EXPECT_EQ(CompiledTargets(), (std::vector<std::string>{"avx512", "avx2", "sse4", "scalar"}));
  EXPECT_NE(std::find(supported.begin(), supported.end(), "sse4"), supported.end())
      << "the x86-64-v2 baseline";
#endif
}

TEST(CpuTargets, AnUnknownNameIsRefusedWithTheChoices) {
  auto k = KernelsFor("avx1024");
  ASSERT_FALSE(k.ok());
  const std::string message = k.status().message();
  EXPECT_NE(message.find("TJ_CPU_TARGET=avx1024: unknown CPU target"), std::string::npos)
      << message;
  for (const std::string& name : CompiledTargets()) {
    EXPECT_NE(message.find(name), std::string::npos) << name << " missing from: " << message;
  }
  EXPECT_NE(message.find("this CPU supports"), std::string::npos) << message;
}

TEST(CpuTargets, ATargetThisCpuLacksIsRefusedWithWhatItHas) {
  const std::vector<std::string> supported = SupportedTargets();
  for (const std::string& name : CompiledTargets()) {
    if (std::find(supported.begin(), supported.end(), name) != supported.end()) continue;
    auto k = KernelsFor(name);
    ASSERT_FALSE(k.ok()) << name;
    EXPECT_NE(k.status().message().find("this CPU cannot run it; it supports " + supported[0]),
              std::string::npos)
        << k.status().message();
    return;
  }
  GTEST_SKIP() << "this CPU runs every target this binary has";
}

}  // namespace
}  // namespace tj::nn::cpu
