#include "trainer/cluster/wire/wire_codec.h"

#include <algorithm>
#include <cstring>

#include "common/big_endian.h"

namespace tj::cluster {

WireWriter& WireWriter::U8(uint8_t v) {
  out_.push_back(static_cast<char>(v));
  return *this;
}

WireWriter& WireWriter::U32(uint32_t v) {
  AppendBigEndian(out_, v);
  return *this;
}

WireWriter& WireWriter::U64(uint64_t v) {
  AppendBigEndian(out_, v);
  return *this;
}

WireWriter& WireWriter::Str(std::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  out_.append(s);
  return *this;
}

WireWriter& WireWriter::Bytes(std::string_view bytes) {
  out_.append(bytes);
  return *this;
}

bool WireReader::Short() {
  short_ = true;
  return false;
}

bool WireReader::U8(uint8_t* v) {
  if (in_.empty()) return Short();
  *v = static_cast<uint8_t>(in_[0]);
  in_.remove_prefix(1);
  return true;
}

bool WireReader::U32(uint32_t* v) {
  if (in_.size() < sizeof *v) return Short();
  *v = LoadBigEndian<uint32_t>(in_);
  in_.remove_prefix(sizeof *v);
  return true;
}

bool WireReader::U64(uint64_t* v) {
  if (in_.size() < sizeof *v) return Short();
  *v = LoadBigEndian<uint64_t>(in_);
  in_.remove_prefix(sizeof *v);
  return true;
}

bool WireReader::I64(int64_t* v) {
  uint64_t bits = 0;
  if (!U64(&bits)) return false;
  *v = static_cast<int64_t>(bits);
  return true;
}

bool WireReader::Length(uint32_t* n, uint32_t max) {
  if (!U32(n)) return false;
  if (*n > max) {
    too_long_ = *n;
    short_ = false;
    return false;
  }
  return true;
}

bool WireReader::Str(std::string* out, uint32_t max) {
  uint32_t n = 0;
  if (!Length(&n, max)) return false;
  if (in_.size() < n) return Short();
  out->assign(in_.data(), n);
  in_.remove_prefix(n);
  return true;
}

bool WireReader::Bytes(char* out, size_t n) {
  if (in_.size() < n) return Short();
  std::memcpy(out, in_.data(), n);
  in_.remove_prefix(n);
  return true;
}

bool WireReader::Matches(std::string_view literal) {
  const size_t there = std::min(in_.size(), literal.size());
  if (in_.substr(0, there) != literal.substr(0, there)) return false;
  if (there < literal.size()) return Short();
  in_.remove_prefix(there);
  return true;
}

std::string WireReader::Error() const {
  if (too_long_ > 0) return "string of " + std::to_string(too_long_) + " bytes too long";
  return "message truncated";
}

}  // namespace tj::cluster
