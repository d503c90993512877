// A small, portable, seedable random generator (SplitMix64): the same seed gives the same
// sequence on every platform and standard library, which determinism and exact resume need.
#pragma once

#include <cstdint>

namespace tj {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), unbiased (rejection sampling).
  uint64_t Below(uint64_t bound) {
    uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % bound);
    uint64_t x;
    do {
      x = Next();
    } while (x >= limit);
    return x % bound;
  }
  // Uniform float in [0, 1) with 24 random bits.
  float NextFloat() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }

 private:
  uint64_t state_;
};

// Derives an independent stream seed from a seed and a stream id (e.g. an epoch number).
inline uint64_t DeriveSeed(uint64_t seed, uint64_t stream) {
  SplitMix64 g(seed ^ (stream * 0xd1b54a32d192ed03ULL + 0x632be59bd9b4e019ULL));
  g.Next();
  return g.Next();
}

}  // namespace tj
