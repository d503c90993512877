// Text from outside (a kubelet's message, an API server's answer, a tenant's log) cut to a
// length and written as JSON. nlohmann::json's dump() throws on invalid UTF-8, and a cut in the
// middle of a character makes valid text invalid: cut at a character boundary (Utf8Prefix), and
// dump what may still hold foreign bytes with DumpSafe, which writes U+FFFD for invalid bytes.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tj {

// At most max_bytes of s, cut before a UTF-8 character that would not fit whole.
inline std::string Utf8Prefix(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t n = max_bytes;
  // Back up over continuation bytes (10xxxxxx) to the start of the character that was cut.
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n));
}

// json.dump(indent) that never throws: invalid UTF-8 in a string becomes U+FFFD.
template <typename Json>
std::string DumpSafe(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tj
