// The per-element math of the GPU backend's kernels (gpu_step.cu, cudnn_conv.cu), written once
// as functions both nvcc (for the device) and the host compiler build. The kernels only map
// threads to elements and call these; the CPU unit tests (tests/unit/trainer/cuda) run the
// same functions over real batches and compare them with the CPU backend, so the arithmetic
// a GPU would run is checked on machines without one. Plain C++ without nvcc.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "trainer/nn/model.h"

#if defined(__CUDACC__)
#define TJ_HD __host__ __device__
#else
#define TJ_HD
#endif

namespace tj::cuda::math {

// Conv 3x3 (32 channels) + bias + 2x2 max-pool + ReLU of pooled output o (o = cell * 32 + c,
// cell = py * 13 + px) of one 28x28 image; the first maximum of the window wins ties, as on
// the CPU. w is [ky*3+kx][32], b [32].
TJ_HD inline void ConvPoolOutput(const float* img, const float* w, const float* b, int o,
                                 float* pooled, uint8_t* argmax) {
  const int c = o & 31, cell = o >> 5, py = cell / nn::kPoolOut, px = cell % nn::kPoolOut;
  float best = 0.0f;
  int arg = 0;
  for (int d = 0; d < 4; ++d) {
    const int oy = 2 * py + (d >> 1), ox = 2 * px + (d & 1);
    float a = b[c];
    for (int ky = 0; ky < 3; ++ky)
      for (int kx = 0; kx < 3; ++kx)
        a = fmaf(img[(oy + ky) * 28 + ox + kx], w[(ky * 3 + kx) * 32 + c], a);
    if (d == 0 || a > best) {
      best = a;
      arg = d;
    }
  }
  *pooled = best > 0.0f ? best : 0.0f;
  *argmax = static_cast<uint8_t>(arg);
}

// The same from cuDNN's conv output (without bias): the window's four outputs of channel c.
// plane is y[r][c] (26x26).
TJ_HD inline void BiasPoolReluOutput(const float* plane, float bias, int cell, float* pooled,
                                     uint8_t* argmax) {
  const int py = cell / nn::kPoolOut, px = cell % nn::kPoolOut;
  float best = 0.0f;
  int arg = 0;
  for (int d = 0; d < 4; ++d) {
    const float a = plane[(2 * py + (d >> 1)) * nn::kConvOut + 2 * px + (d & 1)] + bias;
    if (d == 0 || a > best) {
      best = a;
      arg = d;
    }
  }
  *pooled = best > 0.0f ? best : 0.0f;
  *argmax = static_cast<uint8_t>(arg);
}

// dy at conv output pixel (oy, ox) of channel c of row r: the pooled gradient where this
// pixel won its window and the ReLU passed it, else 0. pooled, argmax, dpooled are row r's.
TJ_HD inline float PoolReluBackwardPixel(const float* pooled, const uint8_t* argmax,
                                         const float* dpooled, int c, int oy, int ox) {
  if (oy >= 2 * nn::kPoolOut || ox >= 2 * nn::kPoolOut) return 0.0f;
  const int at = ((oy / 2) * nn::kPoolOut + ox / 2) * nn::kConvChannels + c;
  return argmax[at] == (oy & 1) * 2 + (ox & 1) && pooled[at] > 0.0f ? dpooled[at] : 0.0f;
}

// relu(x + bias): the first dense layer's output after cuBLAS's product.
TJ_HD inline float BiasRelu(float x, float bias) {
  const float y = x + bias;
  return y > 0.0f ? y : 0.0f;
}

// Logit j of one row: b2[j] + sum_k h[k] * w2[j][k], k in order.
TJ_HD inline float Logit(const float* h, const float* w2, const float* b2, int j) {
  float a = 0.0f;
  for (int k = 0; k < nn::kHidden; ++k) a = fmaf(h[k], w2[j * nn::kHidden + k], a);
  return a + b2[j];
}

// Softmax cross-entropy of the row's 10 logits z, in double: returns the loss, writes
// dz = (softmax - onehot(label)) * scale and whether the first maximum is the label.
TJ_HD inline double SoftmaxCrossEntropy(const float* z, int label, float scale, float* dz,
                                        int* correct) {
  int best = 0;
  for (int i = 1; i < nn::kClasses; ++i)
    if (z[i] > z[best]) best = i;
  const double m = z[best];
  double sum = 0.0;
  for (int i = 0; i < nn::kClasses; ++i) sum += exp(static_cast<double>(z[i]) - m);
  const double lse = m + log(sum);
  for (int i = 0; i < nn::kClasses; ++i) {
    const double p = exp(static_cast<double>(z[i]) - lse);
    dz[i] = static_cast<float>((p - (i == label ? 1.0 : 0.0)) * scale);
  }
  *correct = best == label ? 1 : 0;
  return lse - z[label];
}

// dhidden[j] of one row: sum_o dz[o] * w2[o][j], zero where the ReLU output h[j] was 0.
TJ_HD inline float HiddenGradient(const float* h, const float* dz, const float* w2, int j) {
  float g = 0.0f;
  for (int o = 0; o < nn::kClasses; ++o) g = fmaf(dz[o], w2[o * nn::kHidden + j], g);
  return h[j] > 0.0f ? g : 0.0f;
}

// Adds one pooled cell's contribution (row r, cell, channel c) to the conv kernel [9] and
// bias [1] gradients of channel c in acc[10]: nothing where the ReLU blocked it.
TJ_HD inline void ConvBackwardCell(const float* img, float pooled, float dpooled, int argmax,
                                   int cell, float* acc) {
  if (!(pooled > 0.0f)) return;
  const int py = cell / nn::kPoolOut, px = cell % nn::kPoolOut;
  const int oy = 2 * py + (argmax >> 1), ox = 2 * px + (argmax & 1);
  for (int ky = 0; ky < 3; ++ky)
    for (int kx = 0; kx < 3; ++kx)
      acc[ky * 3 + kx] = fmaf(img[(oy + ky) * 28 + ox + kx], dpooled, acc[ky * 3 + kx]);
  acc[9] += dpooled;
}

// The small gradients, one per t (db1[64], then dW2[10][64], then db2[10]; kSmallGradients
// in all), each summed over the rows in row order. Returns the value and its offset in the
// parameter layout.
inline constexpr int kSmallGradients = nn::kHidden + nn::kClasses * nn::kHidden + nn::kClasses;
TJ_HD inline float SmallGradient(int t, const float* hidden, const float* dlogits,
                                 const float* dhidden, int rows, size_t* offset) {
  float s = 0.0f;
  if (t < nn::kHidden) {
    for (int r = 0; r < rows; ++r) s += dhidden[r * nn::kHidden + t];
    *offset = nn::Layout::kDense1Bias + t;
  } else if (t < nn::kHidden + nn::kClasses * nn::kHidden) {
    const int i = t - nn::kHidden, o = i / nn::kHidden, j = i % nn::kHidden;
    for (int r = 0; r < rows; ++r)
      s = fmaf(dlogits[r * nn::kClasses + o], hidden[r * nn::kHidden + j], s);
    *offset = nn::Layout::kDense2Kernel + i;
  } else {
    const int o = t - nn::kHidden - nn::kClasses * nn::kHidden;
    for (int r = 0; r < rows; ++r) s += dlogits[r * nn::kClasses + o];
    *offset = nn::Layout::kDense2Bias + o;
  }
  return s;
}

// Adam's step size for iteration t (from 1): lr * sqrt(1 - beta2^t) / (1 - beta1^t), in double
// from the float constants, as nn::Adam computes it.
TJ_HD inline float AdamStepSize(double learning_rate, double t, float beta1, float beta2) {
  return static_cast<float>(learning_rate * sqrt(1.0 - pow(static_cast<double>(beta2), t)) /
                            (1.0 - pow(static_cast<double>(beta1), t)));
}

// One element's Adam update with step size a.
TJ_HD inline void AdamUpdate(float* w, float g, float* m, float* v, float a, float one_minus_b1,
                             float one_minus_b2, float eps) {
  *m += (g - *m) * one_minus_b1;
  *v += (g * g - *v) * one_minus_b2;
  *w -= a * *m / (sqrtf(*v) + eps);
}

// cuDNN's KCRS filter layout [c][k] (one input channel) from ours [k][c] and back: the source
// index of destination t.
TJ_HD inline int KcrsSourceOfOurs(int t) { return (t % 9) * nn::kConvChannels + t / 9; }
TJ_HD inline int OursSourceOfKcrs(int t) {
  return (t % nn::kConvChannels) * 9 + t / nn::kConvChannels;
}

}  // namespace tj::cuda::math
