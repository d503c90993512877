// The grid and block sizes of every kernel launch of the GPU backend, as host functions of
// the shapes, so that unit tests can check on any machine that each launch covers every
// element exactly once (the kernels return early for the threads past the end) and that no
// block is wholly idle. Plain C++; gpu_step.cu and cudnn_conv.cu launch with these.
#pragma once

#include <cstddef>

#include "trainer/nn/model.h"

namespace tj::cuda {

struct LaunchShape {
  int grid = 0;   // blocks
  int block = 0;  // threads per block
};

// One thread per element, 256 per block: ceil(n / 256) blocks. n >= 1.
inline constexpr int kElementwiseBlock = 256;
constexpr LaunchShape Elementwise(size_t n) {
  return {static_cast<int>((n + kElementwiseBlock - 1) / kElementwiseBlock), kElementwiseBlock};
}

// The fused conv forward: one block per image, its 256 threads striding over the image's
// kFlat pooled outputs.
constexpr LaunchShape ConvForwardPerImage(int rows) { return {rows, 256}; }

// The head (dense2, softmax, dhidden): one block per row, one thread per hidden unit.
constexpr LaunchShape HeadPerRow(int rows) { return {rows, nn::kHidden}; }

// The conv parameters' gradients: one block per output channel; its threads stride over
// rows x cells and reduce their partial sums in a tree (the block size is a power of two).
inline constexpr int kConvBackwardThreads = 256;
constexpr LaunchShape ConvBackwardPerChannel() { return {nn::kConvChannels, kConvBackwardThreads}; }

// The filter layout conversions: one block, a thread per filter element.
constexpr LaunchShape FilterElements() { return {1, 9 * nn::kConvChannels}; }

// Single-thread bookkeeping (the batch's loss sum, Adam's step size).
constexpr LaunchShape OneThread() { return {1, 1}; }

}  // namespace tj::cuda
