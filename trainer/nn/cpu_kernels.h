// CPU kernels of the seeds' model, float32, vectorised with GCC/Clang vector extensions
// (16 lanes: AVX-512 where the build targets it, two AVX2 halves otherwise).
//
// Every output element is accumulated in an order that depends only on the shapes, never
// on how rows or outputs are split among threads: the results are bitwise the same for
// any thread count.
#pragma once

#include <cstdint>

namespace tj::nn::cpu {

// Conv2D(32, 3x3, valid) + bias + ReLU + MaxPool(2x2) on one 28x28 image.
// pooled[13*13*32] (h, w, c) receives the pooled activations; argmax[13*13*32] which of the
// 4 window positions (dy*2+dx) won, for the backward pass.
void ConvReluPoolForward(const float* image, const float* kernel, const float* bias, float* pooled,
                         uint8_t* argmax);

// Gradients of the conv kernel [9][32] and bias [32] for one image, given the gradient
// w.r.t. the pooled output (already zero where the pooled activation is 0). Overwrites
// dkernel and dbias.
void ConvBackwardParams(const float* image, const uint8_t* argmax, const float* dpooled,
                        float* dkernel, float* dbias);

// Y[r][o] = bias[o] + sum_k X[r][k] * W[o][k]  for r < rows, o < outputs; ReLU if `relu`.
// X is rows x K (row stride K), W is outputs x K, Y is rows x outputs. K % 16 == 0.
void DenseForward(const float* X, int rows, int K, const float* W, const float* bias, int outputs,
                  bool relu, float* Y);

// dX[r][k] = sum_o dY[r][o] * W[o][k], then zeroed where mask[r][k] <= 0 (mask may be null).
// dY is rows x outputs, W outputs x K, dX and mask rows x K. K % 32 == 0.
void DenseBackwardInput(const float* dY, int rows, int outputs, const float* W, int K,
                        const float* mask, float* dX);

// dW[o][k] = sum_r dY[r][o] * X[r][k] for o in [o_begin, o_end) (rows summed in order).
// K % 32 == 0.
void DenseBackwardWeights(const float* dY, int rows, int outputs, const float* X, int K,
                          int o_begin, int o_end, float* dW);

// Softmax cross-entropy of one row of logits: returns the loss, writes
// dlogits = (softmax - onehot(label)) * scale, and whether argmax(logits) == label.
double SoftmaxCrossEntropy(const float* logits, int classes, int label, float scale, float* dlogits,
                           bool* correct);

}  // namespace tj::nn::cpu
