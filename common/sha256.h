// SHA-256 and HMAC-SHA256 through OpenSSL, with hex output. Thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tj {

using Digest = std::array<uint8_t, 32>;

// Incremental SHA-256: Update() any number of times, then Final() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t size);
  Digest Final();

 private:
  void* digest_context_;  // EVP_MD_CTX*
};

Digest Sha256Of(const void* data, size_t size);
// HMAC-SHA256, or an error when OpenSSL cannot compute it (or the key is over INT_MAX bytes):
// never a digest that was not computed, so a caller comparing MACs fails closed.
StatusOr<Digest> HmacSha256(std::string_view key, const void* data, size_t size);
std::string ToHex(std::span<const uint8_t> bytes);

}  // namespace tj
