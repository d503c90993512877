// CPU kernels of the seeds' model, float32, compiled once per SIMD target with Google Highway
// (AVX-512, AVX2+FMA and SSE4 on x86-64, NEON on arm64, portable C++ everywhere) and chosen at
// run time: the best target this CPU runs, unless TJ_CPU_TARGET names another.
//
// Within one target, every output element is accumulated in an order that depends only on the
// shapes, never on how rows or outputs are split among threads: the results are bitwise the
// same for any thread count. Targets differ in the last bits (the vector width orders the sums
// differently; SSE4 and the portable target have no fused multiply-add): docs/trainer.md states
// the tolerance the tests hold every target to against the portable one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tj::nn::cpu {

// One target's kernels. The tables live for the whole process; never copy one, point to it.
struct Kernels {
  const char* target;  // "avx512", "avx2", "sse4", "neon" or "scalar"

  // Conv2D(32, 3x3, valid) + bias + ReLU + MaxPool(2x2) on one 28x28 image.
  // pooled[13*13*32] (h, w, c) receives the pooled activations; argmax[13*13*32] which of the
  // 4 window positions (dy*2+dx) won, for the backward pass.
  void (*conv_relu_pool_forward)(const float* image, const float* kernel, const float* bias,
                                 float* pooled, uint8_t* argmax);

  // Gradients of the conv kernel [9][32] and bias [32] for one image, given the gradient
  // w.r.t. the pooled output (already zero where the pooled activation is 0). Overwrites
  // dkernel and dbias.
  void (*conv_backward_params)(const float* image, const uint8_t* argmax, const float* dpooled,
                               float* dkernel, float* dbias);

  // Y[r][o] = bias[o] + sum_k X[r][k] * W[o][k]  for r < rows, o < outputs; ReLU if `relu`.
  // X is rows x K (row stride K), W is outputs x K, Y is rows x outputs. K % 32 == 0.
  void (*dense_forward)(const float* X, int rows, int K, const float* W, const float* bias,
                        int outputs, bool relu, float* Y);

  // dX[r][k] = sum_o dY[r][o] * W[o][k], then zeroed where mask[r][k] <= 0 (mask may be null).
  // dY is rows x outputs, W outputs x K, dX and mask rows x K. K % 32 == 0.
  void (*dense_backward_input)(const float* dY, int rows, int outputs, const float* W, int K,
                               const float* mask, float* dX);

  // dW[o][k] = sum_r dY[r][o] * X[r][k] for o in [o_begin, o_end) (rows summed in order).
  // K % 32 == 0.
  void (*dense_backward_weights)(const float* dY, int rows, int outputs, const float* X, int K,
                                 int o_begin, int o_end, float* dW);

  // Adam's update of n elements (nn::Adam): m += (g - m) * one_minus_b1;
  // v += (g^2 - v) * one_minus_b2; w -= alpha * m / (sqrt(v) + eps). Element i's result does
  // not depend on n or on where the range starts.
  void (*adam_update)(float* w, const float* g, float* m, float* v, int n, float alpha,
                      float one_minus_b1, float one_minus_b2, float eps);

  // C[r][n] = min(max(bias[n] + c0 + sum_k A(r, k) * B[k][n], lo), hi) for r < rows, n < N,
  // the sum over k in order (a general matrix product, columns along the vector lanes: no
  // horizontal sums, no padding of K), where A(r, k) = A[r * a_row + k * a_col] (a_col 1: A
  // row-major; a_row 1: A transposed) and c0 is C's value when `accumulate`, else 0. B is K x
  // N with row stride ldb, C rows x N with row stride ldc. B's rows and bias (which may be
  // null: 0) must be readable up to N rounded up to kGemmColumnPad (what lies past N there is
  // not used); C is read and written for n < N only. lo = -inf and hi = +inf: no activation; 0
  // and +inf: ReLU; 0 and 6: ReLU6.
  void (*gemm)(const float* A, int a_row, int a_col, const float* B, int ldb, const float* bias,
               int rows, int K, int N, float lo, float hi, bool accumulate, float* C, int ldc);
};

// The padding gemm's B and bias need: N rounded up to this.
inline constexpr int kGemmColumnPad = 16;

// The targets this binary has kernels for and this CPU runs, best first ("scalar" is last and
// always there).
std::vector<std::string> SupportedTargets();

// Every target name this binary has kernels for, best first (some may not run on this CPU).
std::vector<std::string> CompiledTargets();

// The kernels of the best target this CPU runs.
const Kernels& BestKernels();

// The kernels of target `name`, or of the best one when `name` is empty or "auto". An error
// naming the accepted values and those this CPU supports when `name` is none of them or this
// CPU cannot run it.
StatusOr<const Kernels*> KernelsFor(std::string_view name);

// Softmax cross-entropy of one row of logits: returns the loss, writes
// dlogits = (softmax - onehot(label)) * scale, and whether argmax(logits) == label.
// Scalar, in double: the same on every target.
double SoftmaxCrossEntropy(const float* logits, int classes, int label, float scale, float* dlogits,
                           bool* correct);

}  // namespace tj::nn::cpu
