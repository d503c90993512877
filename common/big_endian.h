// Fixed-width unsigned integers as big-endian (network order) bytes, whatever the host's byte
// order: the trainer's wire protocols (trainer/cluster/wire/wire_codec.h, the one codec that
// writes and reads them) and the IDX files' headers (trainer/data/idx_reader.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace tj {

// Appends the sizeof(T) bytes of `v`, most significant first.
template <typename T>
void AppendBigEndian(std::string& out, T v) {
  static_assert(std::is_unsigned_v<T>, "unsigned integers only");
  for (size_t i = sizeof(T); i-- > 0;) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The T whose bytes, most significant first, stand at `in[offset]`. The caller checks that
// sizeof(T) bytes are there.
template <typename T>
T LoadBigEndian(std::string_view in, size_t offset = 0) {
  static_assert(std::is_unsigned_v<T>, "unsigned integers only");
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v = static_cast<T>((v << 8) | static_cast<uint8_t>(in[offset + i]));
  }
  return v;
}

}  // namespace tj
