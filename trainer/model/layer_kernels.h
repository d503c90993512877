// The per-image loops of the declared-model engine (cpu_engine.h) that the SIMD kernels of
// trainer/nn/cpu_kernels.h do not cover: im2col and its adjoint, pooling, depthwise
// convolution, zero padding. Plain C++ compiled once for the build's baseline (no per-target code),
// each output summed in one fixed order, so they give the same bits on every CPU and for any thread
// count. Images are NHWC without N: element (y, x, c) at (y * width + x) * channels + c.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trainer/model/graph.h"

namespace tj::model::kernels {

// A window's geometry over an image: input, output, window, strides, padding before.
struct Window {
  int in_h = 1, in_w = 1, channels = 1;  // input
  int out_h = 1, out_w = 1;
  int kh = 1, kw = 1, sh = 1, sw = 1, pad_top = 0, pad_left = 0;
  int positions() const { return out_h * out_w; }
};
Window WindowOf(const Layer& layer);

// Rows of the patch matrix of one image: row p (an output position) holds, for each tap
// (ky, kx) and each of the group's `group_channels` channels from `c0`, the input under it (0
// where the window covers padding), in the order of Keras' kernel (ky, kx, channel); columns
// from the tap count times group_channels up to `stride` are 0.
void Im2Col(const float* x, const Window& w, int c0, int group_channels, int stride, float* col);

// The adjoint of Im2Col: adds each patch-matrix gradient to the input element it came from,
// rows in order, then taps in order.
void Col2ImAdd(const float* dcol, const Window& w, int c0, int group_channels, int stride,
               float* dx);

// Max over each window's elements inside the image (padding never wins; the first maximum in
// window order wins ties); argmax[i] is the input element (y * in_w + x) * channels + c that
// won output i.
void MaxPoolForward(const float* x, const Window& w, float* y, int32_t* argmax);
void MaxPoolBackwardAdd(const float* dy, const int32_t* argmax, size_t outputs, float* dx);

// Mean over each window's elements inside the image (padding not counted, as TensorFlow).
void AvgPoolForward(const float* x, const Window& w, float* y);
void AvgPoolBackwardAdd(const float* dy, const Window& w, float* dx);

// Depthwise convolution: output channel c * dm + m is input channel c under kernel
// (ky, kx, c, m), plus bias[c * dm + m] (bias may be null). `acc` is scratch of channels * dm.
void DepthwiseForward(const float* x, const Window& w, int dm, const float* kernel,
                      const float* bias, float* acc, float* y);
// Its gradients for one image: dkernel and dbias (may be null) are overwritten; dx is added
// to.
void DepthwiseBackward(const float* x, const float* dy, const Window& w, int dm,
                       const float* kernel, float* dkernel, float* dbias, float* dx);

// ZeroPadding2D: y is x framed by zeros, x's element (y, x, c) at (y + pad_top, x + pad_left,
// c) of the out_h x out_w output; its adjoint adds that window of dy to dx.
void ZeroPadForward(const float* x, const Window& w, float* y);
void ZeroPadBackwardAdd(const float* dy, const Window& w, float* dx);

}  // namespace tj::model::kernels
