// The one codec of the trainer's wire protocols (the rendezvous's, rendezvous_protocol.h, and
// the links' between tasks, link_protocol.h): big-endian integers, strings prefixed by their
// u32 length, raw bytes. WireWriter appends fields to a message; WireReader takes them from
// bytes already received and checks every read against what is there, and every announced
// length against the caller's maximum before anything is copied, so that a peer's bytes can
// neither be read past nor make the reader allocate more than the protocol allows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tj::cluster {

// Bytes of a u32 length prefix (of a string, or of a frame's body).
inline constexpr size_t kWireLengthBytes = 4;

class WireWriter {
 public:
  WireWriter& U8(uint8_t v);
  WireWriter& U32(uint32_t v);
  WireWriter& U64(uint64_t v);
  // Two's complement, as a U64.
  WireWriter& I64(int64_t v) { return U64(static_cast<uint64_t>(v)); }
  // u32 length, then the bytes.
  WireWriter& Str(std::string_view s);
  // The bytes as they are (a magic, a nonce, a MAC, a body whose length went before).
  WireWriter& Bytes(std::string_view bytes);
  template <size_t N>
  WireWriter& Bytes(const std::array<uint8_t, N>& a) {
    return Bytes(std::string_view(reinterpret_cast<const char*>(a.data()), N));
  }

  const std::string& bytes() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads fields in order; each read returns false when it cannot be done, and then short_input()
// says whether the bytes ran out (more may come) or the field was refused (a length over its
// maximum). Not thread-safe; views `in`, which must outlive the reader.
class WireReader {
 public:
  explicit WireReader(std::string_view in) : in_(in) {}

  bool U8(uint8_t* v);
  bool U32(uint32_t* v);
  bool U64(uint64_t* v);
  bool I64(int64_t* v);
  // A u32 length, checked against `max` before anything is copied, then that many bytes.
  bool Str(std::string* out, uint32_t max);
  // A u32 length prefix alone (a frame's), checked against `max`; *n is the announced length
  // even when it is refused.
  bool Length(uint32_t* n, uint32_t max);
  // Exactly out.size() bytes.
  bool Bytes(char* out, size_t n);
  template <size_t N>
  bool Bytes(std::array<uint8_t, N>* a) {
    return Bytes(reinterpret_cast<char*>(a->data()), N);
  }
  // The input goes on with `literal` (a magic), all of it there: consumed. False when a byte
  // differs or, with short_input(), when the bytes there match but stop short: garbage shows
  // from its first byte while a real hello is still arriving.
  bool Matches(std::string_view literal);

  // Every byte read.
  bool at_end() const { return in_.empty(); }
  // The last failed read ran out of bytes (rather than being refused).
  bool short_input() const { return short_; }
  // Why the last read failed, for a message: "message truncated" or "string of N bytes too
  // long".
  std::string Error() const;

 private:
  bool Short();
  std::string_view in_;
  bool short_ = false;
  uint32_t too_long_ = 0;
};

}  // namespace tj::cluster
