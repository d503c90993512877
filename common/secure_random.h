// Secrets and unguessable names (a job's rendezvous key, a nonce) from the kernel's CSPRNG,
// getrandom(2): never std::random_device, whose source the standard leaves to the library.
#pragma once

#include <sys/random.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/status.h"

namespace tj {

// Fills buf[0, size) from getrandom(2); an error naming errno when the kernel refuses.
inline Status SecureRandomBytes(void* buf, size_t size) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t filled = 0;
  while (filled < size) {
    const ssize_t n = ::getrandom(p + filled, size - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error(std::string("getrandom: ") + std::strerror(errno));
    filled += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// `bytes` random bytes as 2*bytes lowercase hex digits.
inline StatusOr<std::string> SecureRandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (Status s = SecureRandomBytes(raw.data(), raw.size()); !s.ok()) return s;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (const char c : raw) {
    const auto v = static_cast<unsigned char>(c);
    out += kHex[v >> 4];
    out += kHex[v & 15];
  }
  return out;
}

}  // namespace tj
