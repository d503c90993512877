#include "trainer/observe/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/little_endian.h"
#include "trainer/observe/crc32c.h"

namespace tj::observe {
namespace fs = std::filesystem;

namespace {

constexpr char kFileVersion[] = "brain.Event:2";

// ---- Protobuf wire format, the few pieces needed.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutTag(std::string& out, uint32_t field, WireType type) {
  PutVarint(out, (field << 3) | type);
}

void PutBytes(std::string& out, uint32_t field, const std::string& bytes) {
  PutTag(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out += bytes;
}

// A cursor over one protobuf message.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return pos_ >= bytes_.size(); }

  bool ReadVarint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) return false;
      const uint8_t byte = static_cast<uint8_t>(bytes_[pos_++]);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return true;
    }
    return false;
  }
  bool ReadFixed(size_t n, std::string_view& out) {
    if (bytes_.size() - pos_ < n) return false;
    out = bytes_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool ReadLengthDelimited(std::string_view& out) {
    uint64_t len;
    if (!ReadVarint(len) || len > bytes_.size() - pos_) return false;
    out = bytes_.substr(pos_, len);
    pos_ += len;
    return true;
  }
  // Skips a field of an unknown number.
  bool Skip(uint32_t type) {
    uint64_t v;
    std::string_view s;
    switch (type) {
      case kVarint:
        return ReadVarint(v);
      case kFixed64:
        return ReadFixed(8, s);
      case kLengthDelimited:
        return ReadLengthDelimited(s);
      case kFixed32:
        return ReadFixed(4, s);
      default:
        return false;
    }
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

StatusOr<ScalarValue> DecodeValue(std::string_view bytes) {
  ScalarValue value;
  ProtoReader r(bytes);
  while (!r.done()) {
    uint64_t key;
    if (!r.ReadVarint(key)) return Status::Error("Summary.Value: bad field key");
    const uint32_t field = static_cast<uint32_t>(key >> 3), type = static_cast<uint32_t>(key & 7);
    std::string_view s;
    if (field == 1 && type == kLengthDelimited) {
      if (!r.ReadLengthDelimited(s)) return Status::Error("Summary.Value.tag: truncated");
      value.tag = std::string(s);
    } else if (field == 2 && type == kFixed32) {
      if (!r.ReadFixed(4, s)) return Status::Error("Summary.Value.simple_value: truncated");
      value.value = std::bit_cast<float>(LoadLittleEndian<uint32_t>(s));
    } else if (!r.Skip(type)) {
      return Status::Error("Summary.Value: field " + std::to_string(field) + " is malformed");
    }
  }
  return value;
}

StatusOr<TensorBoardEvent> DecodeEvent(std::string_view bytes) {
  TensorBoardEvent event;
  ProtoReader r(bytes);
  while (!r.done()) {
    uint64_t key;
    if (!r.ReadVarint(key)) return Status::Error("Event: bad field key");
    const uint32_t field = static_cast<uint32_t>(key >> 3), type = static_cast<uint32_t>(key & 7);
    std::string_view s;
    uint64_t v;
    if (field == 1 && type == kFixed64) {
      if (!r.ReadFixed(8, s)) return Status::Error("Event.wall_time: truncated");
      event.wall_time = std::bit_cast<double>(LoadLittleEndian<uint64_t>(s));
    } else if (field == 2 && type == kVarint) {
      if (!r.ReadVarint(v)) return Status::Error("Event.step: truncated");
      event.step = static_cast<int64_t>(v);
    } else if (field == 3 && type == kLengthDelimited) {
      if (!r.ReadLengthDelimited(s)) return Status::Error("Event.file_version: truncated");
      event.file_version = std::string(s);
    } else if (field == 5 && type == kLengthDelimited) {
      if (!r.ReadLengthDelimited(s)) return Status::Error("Event.summary: truncated");
      ProtoReader summary(s);
      while (!summary.done()) {
        uint64_t skey;
        if (!summary.ReadVarint(skey)) return Status::Error("Summary: bad field key");
        std::string_view vb;
        if ((skey >> 3) == 1 && (skey & 7) == kLengthDelimited) {
          if (!summary.ReadLengthDelimited(vb)) return Status::Error("Summary.value: truncated");
          StatusOr<ScalarValue> value = DecodeValue(vb);
          if (!value.ok()) return value.status();
          event.scalars.push_back(std::move(value).value());
        } else if (!summary.Skip(static_cast<uint32_t>(skey & 7))) {
          return Status::Error("Summary: malformed field");
        }
      }
    } else if (!r.Skip(type)) {
      return Status::Error("Event: field " + std::to_string(field) + " is malformed");
    }
  }
  return event;
}

std::string Hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

double SystemWallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string EncodeScalarEvent(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;
  PutBytes(v, 1, tag);
  PutTag(v, 2, kFixed32);
  AppendLittleEndian<uint32_t>(v, std::bit_cast<uint32_t>(value));
  std::string summary;
  PutBytes(summary, 1, v);
  std::string event;
  PutTag(event, 1, kFixed64);
  AppendLittleEndian<uint64_t>(event, std::bit_cast<uint64_t>(wall_time));
  PutTag(event, 2, kVarint);
  PutVarint(event, static_cast<uint64_t>(step));
  PutBytes(event, 5, summary);
  return event;
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string event;
  PutTag(event, 1, kFixed64);
  AppendLittleEndian<uint64_t>(event, std::bit_cast<uint64_t>(wall_time));
  PutBytes(event, 3, kFileVersion);
  return event;
}

std::string FrameRecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLittleEndian<uint64_t>(out, data.size());
  AppendLittleEndian<uint32_t>(out, MaskCrc(Crc32c(out.data(), 8)));
  out += data;
  AppendLittleEndian<uint32_t>(out, MaskCrc(Crc32c(data.data(), data.size())));
  return out;
}

// ---- ScalarWriter

StatusOr<std::unique_ptr<ScalarWriter>> ScalarWriter::Open(const std::string& dir,
                                                           WallClockFn now) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return Status::Error("creating TensorBoard log directory " + dir + ": " + ec.message() +
                         " (is --log-dir writable?)");
  }
  const double t = now();
  const std::string base =
      (fs::path(dir) / ("events.out.tfevents." +
                        std::to_string(static_cast<int64_t>(std::floor(t))) + "." + Hostname()))
          .string();
  // O_EXCL: never append to another writer's file (a restart within the same second).
  std::string path = base;
  int fd = -1;
  for (int n = 1; n < 1000; ++n) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
    path = base + "." + std::to_string(n);
  }
  if (fd < 0)
    return Status::Error("creating TensorBoard event file " + path + ": " + std::strerror(errno));
  FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    ::close(fd);
    return Status::Error("opening TensorBoard event file " + path + ": " + std::strerror(errno));
  }
  std::unique_ptr<ScalarWriter> writer(new ScalarWriter(path, file, std::move(now)));
  {
    MutexLock lock(writer->mu_);
    TJ_RETURN_IF_ERROR(writer->WriteRecord(EncodeFileVersionEvent(t)));
  }
  TJ_RETURN_IF_ERROR(writer->Flush());
  return writer;
}

ScalarWriter::ScalarWriter(std::string path, FILE* file, WallClockFn now)
    : path_(std::move(path)), now_(std::move(now)), file_(file) {}

ScalarWriter::~ScalarWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status ScalarWriter::WriteRecord(const std::string& data) {
  const std::string record = FrameRecord(data);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    return Status::Error("writing TensorBoard event file " + path_ + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status ScalarWriter::WriteScalar(const std::string& tag, int64_t step, float value) {
  const std::string event = EncodeScalarEvent(now_(), step, tag, value);
  MutexLock lock(mu_);
  return WriteRecord(event);
}

Status ScalarWriter::Flush() {
  MutexLock lock(mu_);
  if (std::fflush(file_) != 0) {
    return Status::Error("flushing TensorBoard event file " + path_ + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

// ---- Reading

StatusOr<std::vector<TensorBoardEvent>> ParseEventRecords(const std::string& bytes,
                                                          const std::string& source) {
  std::vector<TensorBoardEvent> events;
  size_t pos = 0;
  for (size_t index = 0; pos < bytes.size(); ++index) {
    const std::string where =
        source + ": record " + std::to_string(index) + " at byte " + std::to_string(pos);
    if (bytes.size() - pos < 12) return Status::Error(where + ": truncated length header");
    const uint64_t len = LoadLittleEndian<uint64_t>(bytes, pos);
    if (MaskCrc(Crc32c(bytes.data() + pos, 8)) != LoadLittleEndian<uint32_t>(bytes, pos + 8)) {
      return Status::Error(where + ": length CRC mismatch (corrupt file)");
    }
    if (len > bytes.size() - pos - 12 || bytes.size() - pos - 12 - len < 4) {
      return Status::Error(where + ": truncated (record of " + std::to_string(len) + " bytes)");
    }
    const std::string data = bytes.substr(pos + 12, len);
    if (MaskCrc(Crc32c(data.data(), data.size())) !=
        LoadLittleEndian<uint32_t>(bytes, pos + 12 + len)) {
      return Status::Error(where + ": data CRC mismatch (corrupt file)");
    }
    StatusOr<TensorBoardEvent> event = DecodeEvent(data);
    if (!event.ok()) return event.status().WithContext(where);
    events.push_back(std::move(event).value());
    pos += 12 + len + 4;
  }
  return events;
}

StatusOr<std::vector<TensorBoardEvent>> ReadEventFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return ParseEventRecords(buffer.str(), path);
}

StatusOr<std::vector<std::string>> ListEventFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().find("tfevents") != std::string::npos) {
      out.push_back(it->path().string());
    }
  }
  if (ec) return Status::Error("listing TensorBoard log directory " + dir + ": " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tj::observe
