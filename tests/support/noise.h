// Deterministic test data for sums: floats that are not integers, so that a sum depends on
// the order of its additions (an all-reduce that reorders them shows in the bits).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tj::testing {

inline float Noise(int rank, size_t i) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(rank + 1) * 40503u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return static_cast<float>(x % 2000003) / 1000.0f - 1000.0f + 0.1234567f;
}

}  // namespace tj::testing
