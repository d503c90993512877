#include "common/sha256.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <limits>
#include <stdexcept>
#include <string>

namespace tj {

Sha256::Sha256() : digest_context_(EVP_MD_CTX_new()) {
  if (digest_context_ == nullptr ||
      EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(digest_context_), EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL: cannot initialise SHA-256");  // out of memory only
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(digest_context_)); }

void Sha256::Update(const void* data, size_t size) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(digest_context_), data, size);
}

Digest Sha256::Final() {
  Digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(digest_context_), d.data(), &len);
  return d;
}

Digest Sha256Of(const void* data, size_t size) {
  Sha256 h;
  h.Update(data, size);
  return h.Final();
}

StatusOr<Digest> HmacSha256(std::string_view key, const void* data, size_t size) {
  if (key.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return Status::Error("HMAC-SHA256: a key of " + std::to_string(key.size()) +
                         " bytes is longer than OpenSSL takes");
  }
  Digest d{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           static_cast<const unsigned char*>(data), size, d.data(), &len) == nullptr ||
      len != d.size()) {
    return Status::Error("HMAC-SHA256: OpenSSL failed to compute it");
  }
  return d;
}

std::string ToHex(std::span<const uint8_t> bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

}  // namespace tj
