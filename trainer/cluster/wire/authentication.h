// What both handshakes authenticate with (the rendezvous's, rendezvous_protocol.h, and the
// links', link_protocol.h): fresh nonces from the kernel's CSPRNG, HMAC-SHA256 tags under the
// job's key (or a session's), compared in constant time. Every HMAC failure fails closed: an
// error, never an empty or zero MAC that could match.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace tj::cluster {

using Nonce = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 32>;

// HMAC-SHA256 of `message` under `key`.
StatusOr<Mac> MacOf(std::string_view key, std::string_view message);
// A MAC's bytes: to send, or to key further MACs with (a session key).
inline std::string_view MacBytes(const Mac& mac) {
  return {reinterpret_cast<const char*>(mac.data()), mac.size()};
}
// Constant-time comparison.
bool MacEquals(const Mac& a, const Mac& b);
// A fresh nonce from the kernel's CSPRNG.
StatusOr<Nonce> NewNonce();

}  // namespace tj::cluster
