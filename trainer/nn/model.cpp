#include "trainer/nn/model.h"

#include <bit>
#include <cmath>

#include "common/random.h"
#include "common/sha256.h"

namespace tj::nn {
namespace {

void GlorotUniform(float* w, size_t count, int fan_in, int fan_out, uint64_t seed) {
  float limit = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  SplitMix64 rng(seed);
  for (size_t i = 0; i < count; ++i) w[i] = (2.0f * rng.NextFloat() - 1.0f) * limit;
}

}  // namespace

std::vector<float> InitialParameters(uint64_t seed) {
  std::vector<float> p(Layout::kCount, 0.0f);
  GlorotUniform(&p[Layout::kConvKernel], 9 * kConvChannels, 9, 9 * kConvChannels,
                DeriveSeed(seed, 1001));
  GlorotUniform(&p[Layout::kDense1Kernel], size_t{kHidden} * kFlat, kFlat, kHidden,
                DeriveSeed(seed, 1002));
  GlorotUniform(&p[Layout::kDense2Kernel], kClasses * kHidden, kHidden, kClasses,
                DeriveSeed(seed, 1003));
  return p;
}

std::string WeightsDigest(const float* params, size_t count) {
  static_assert(std::endian::native == std::endian::little, "little-endian hosts only");
  return ToHex(Sha256Of(params, count * sizeof(float)));
}

nlohmann::json ArchitectureJson() {
  return {
      {"name", "seeds-cnn"},
      {"input", {28, 28, 1}},
      {"layers",
       {{{"type", "conv2d"},
         {"filters", 32},
         {"kernel", {3, 3}},
         {"padding", "valid"},
         {"activation", "relu"},
         {"kernel_layout", "ky,kx,out"}},
        {{"type", "maxpool2d"}, {"pool", {2, 2}}},
        {{"type", "flatten"}, {"order", "h,w,c"}},
        {{"type", "dense"}, {"units", 64}, {"activation", "relu"}, {"kernel_layout", "out,in"}},
        {{"type", "dense"}, {"units", 10}, {"kernel_layout", "out,in"}}}},
      {"parameters", Layout::kCount},
      {"dtype", "float32"},
      {"byte_order", "little-endian"},
  };
}

}  // namespace tj::nn
