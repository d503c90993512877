// Fixed-width unsigned integers as little-endian bytes, whatever the host's byte order: the
// state file's header (trainer/checkpoint/state_file.cpp) and TensorBoard's event records and
// protobuf fixed32/fixed64 fields (trainer/observe/tensorboard_writer.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace tj {

// Appends the sizeof(T) bytes of `v`, least significant first.
template <typename T>
void AppendLittleEndian(std::string& out, T v) {
  static_assert(std::is_unsigned_v<T>, "unsigned integers only");
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The T whose bytes, least significant first, stand at `in[offset]`. The caller checks that
// sizeof(T) bytes are there.
template <typename T>
T LoadLittleEndian(std::string_view in, size_t offset = 0) {
  static_assert(std::is_unsigned_v<T>, "unsigned integers only");
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<T>(static_cast<uint8_t>(in[offset + i])) << (8 * i);
  }
  return v;
}

}  // namespace tj
