// The seeds' model: Conv2D(32, 3x3, relu) -> MaxPool(2) -> Flatten -> Dense(64, relu) ->
// Dense(10), on 28x28x1 images. All 347,146 parameters live in one flat float32 vector in
// the order below, so that gradients are all-reduced in one call and the weights digest is
// well defined.
//
// Parameter layout (float32, little-endian in files and digests), offsets in floats:
//   conv_kernel  [3][3][32]     (ky, kx, out channel; one input channel)       at 0
//   conv_bias    [32]                                                          at 288
//   dense1_kernel[64][5408]     (out, in); in = flatten of [13][13][32] (h,w,c) at 320
//   dense1_bias  [64]                                                          at 346432
//   dense2_kernel[10][64]       (out, in)                                      at 346496
//   dense2_bias  [10]                                                          at 347136
// Dense kernels are stored out-major (like PyTorch's Linear.weight), the transpose of Keras'
// (in, out) kernel: every GEMM of the step then reads memory contiguously.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tj::nn {

inline constexpr int kConvChannels = 32;
inline constexpr int kConvOut = 26;                                // 28 - 3 + 1
inline constexpr int kPoolOut = 13;                                // 26 / 2
inline constexpr int kFlat = kPoolOut * kPoolOut * kConvChannels;  // 5408
inline constexpr int kHidden = 64;
inline constexpr int kClasses = 10;
inline constexpr int kInputPixels = 28 * 28;

struct Layout {
  static constexpr size_t kConvKernel = 0;
  static constexpr size_t kConvBias = kConvKernel + 9 * kConvChannels;
  static constexpr size_t kDense1Kernel = kConvBias + kConvChannels;
  static constexpr size_t kDense1Bias = kDense1Kernel + size_t{kHidden} * kFlat;
  static constexpr size_t kDense2Kernel = kDense1Bias + kHidden;
  static constexpr size_t kDense2Bias = kDense2Kernel + kClasses * kHidden;
  static constexpr size_t kCount = kDense2Bias + kClasses;
};
static_assert(Layout::kCount == 347146, "the seeds' model has 347,146 parameters");

// Glorot-uniform kernels (limit sqrt(6 / (fan_in + fan_out)), Keras' fans: conv 9 and 288,
// dense1 5408 and 64, dense2 64 and 10) and zero biases, from SplitMix64 streams of `seed`.
std::vector<float> InitialParameters(uint64_t seed);

// SHA-256 (hex) of the parameters as little-endian float32 in the layout above.
std::string WeightsDigest(const float* params, size_t count = Layout::kCount);

// The architecture as JSON: exported with the final model and part of a backup's
// fingerprint.
nlohmann::json ArchitectureJson();

}  // namespace tj::nn
