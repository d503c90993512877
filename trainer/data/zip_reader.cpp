#include "trainer/data/zip_reader.h"

#include <zlib.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "common/little_endian.h"

namespace tj::data {
namespace {

// The zip format's records (PKWARE's APPNOTE.TXT): signatures and fixed sizes.
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kCentralSignature = 0x02014b50;
constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr size_t kEndBytes = 22;
constexpr size_t kZip64LocatorBytes = 20;
constexpr size_t kZip64EndBytes = 56;
constexpr size_t kCentralBytes = 46;
constexpr size_t kLocalBytes = 30;
constexpr size_t kMaxComment = 0xffff;
// A central directory larger than this is not an .npz's (a few entries of ~100 bytes).
constexpr uint64_t kMaxCentralDirectory = 16 << 20;

std::string_view Chars(const std::vector<uint8_t>& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

uint16_t U16(std::string_view b, size_t at) { return LoadLittleEndian<uint16_t>(b, at); }
uint32_t U32(std::string_view b, size_t at) { return LoadLittleEndian<uint32_t>(b, at); }
uint64_t U64(std::string_view b, size_t at) { return LoadLittleEndian<uint64_t>(b, at); }

StatusOr<std::vector<uint8_t>> ReadRange(const RandomAccessFile& file, uint64_t offset,
                                         uint64_t size) {
  if (offset > file.size() || size > file.size() - offset) {
    return Status::Error("truncated: " + std::to_string(size) + " bytes at offset " +
                         std::to_string(offset) + " pass the end of the file (" +
                         std::to_string(file.size()) + " bytes)");
  }
  std::vector<uint8_t> out(size);
  TJ_RETURN_IF_ERROR(file.ReadAt(offset, out));
  return out;
}

// Replaces the 0xffffffff fields of a central directory entry by their zip64 extra values.
Status ApplyZip64Extra(std::string_view extra, uint64_t* uncompressed, uint64_t* compressed,
                       uint64_t* local_offset) {
  size_t at = 0;
  while (extra.size() - at >= 4) {
    const uint16_t id = U16(extra, at);
    const uint16_t size = U16(extra, at + 2);
    if (size > extra.size() - at - 4) return Status::Error("an extra field runs past its entry");
    if (id == 0x0001) {
      std::string_view field = extra.substr(at + 4, size);
      size_t f = 0;
      for (uint64_t* v : {uncompressed, compressed, local_offset}) {
        if (*v != 0xffffffffu) continue;
        if (field.size() - f < 8) return Status::Error("a zip64 extra field is too short");
        *v = U64(field, f);
        f += 8;
      }
      return Status::Ok();
    }
    at += 4 + size;
  }
  if (*uncompressed == 0xffffffffu || *compressed == 0xffffffffu || *local_offset == 0xffffffffu) {
    return Status::Error("an entry needs a zip64 extra field and has none");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ZipArchive> ZipArchive::Open(const std::string& path) {
  const std::string context = "zip archive " + path;
  auto file = RandomAccessFile::Open(path);
  if (!file.ok()) return file.status().WithContext(context);
  const uint64_t size = file->size();
  if (size < kEndBytes) {
    return Status::Error(context + ": " + std::to_string(size) +
                         " bytes, too short for a zip archive (an .npz is one)");
  }
  // The end record: the last signature whose comment reaches the end of the file.
  const uint64_t tail_size = std::min<uint64_t>(size, kEndBytes + kMaxComment);
  auto tail = ReadRange(*file, size - tail_size, tail_size);
  if (!tail.ok()) return tail.status().WithContext(context);
  const std::string_view t = Chars(*tail);
  size_t end = std::string_view::npos;
  for (size_t i = t.size() - kEndBytes + 1; i-- > 0;) {
    if (U32(t, i) == kEndSignature && i + kEndBytes + U16(t, i + 20) == t.size()) {
      end = i;
      break;
    }
  }
  if (end == std::string_view::npos) {
    return Status::Error(context +
                         ": no end of central directory record: not a zip archive, or "
                         "truncated");
  }
  if (U16(t, end + 4) != 0 || U16(t, end + 6) != 0) {
    return Status::Error(context + ": spans several disks, which is not supported");
  }
  uint64_t count = U16(t, end + 10);
  uint64_t cd_size = U32(t, end + 12);
  uint64_t cd_offset = U32(t, end + 16);
  const uint64_t end_offset = size - tail_size + end;
  if (count == 0xffff || cd_size == 0xffffffffu || cd_offset == 0xffffffffu) {
    if (end_offset < kZip64LocatorBytes) {
      return Status::Error(context + ": a zip64 archive without its zip64 locator");
    }
    auto locator = ReadRange(*file, end_offset - kZip64LocatorBytes, kZip64LocatorBytes);
    if (!locator.ok()) return locator.status().WithContext(context);
    if (U32(Chars(*locator), 0) != kZip64LocatorSignature) {
      return Status::Error(context + ": a zip64 archive without its zip64 locator");
    }
    auto end64 = ReadRange(*file, U64(Chars(*locator), 8), kZip64EndBytes);
    if (!end64.ok()) return end64.status().WithContext(context + ": zip64 end record");
    const std::string_view e = Chars(*end64);
    if (U32(e, 0) != kZip64EndSignature) {
      return Status::Error(context + ": the zip64 locator points at no zip64 end record");
    }
    count = U64(e, 32);
    cd_size = U64(e, 40);
    cd_offset = U64(e, 48);
  }
  if (cd_size > kMaxCentralDirectory) {
    return Status::Error(context + ": a central directory of " + std::to_string(cd_size) +
                         " bytes, over the limit of " + std::to_string(kMaxCentralDirectory));
  }
  if (count > cd_size / kCentralBytes) {
    return Status::Error(context + ": " + std::to_string(count) + " entries cannot fit in a " +
                         std::to_string(cd_size) + "-byte central directory");
  }
  auto cd = ReadRange(*file, cd_offset, cd_size);
  if (!cd.ok()) return cd.status().WithContext(context + ": central directory");
  const std::string_view c = Chars(*cd);
  std::vector<Entry> entries;
  size_t at = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string where = context + ": central directory entry " + std::to_string(i);
    if (c.size() - at < kCentralBytes || U32(c, at) != kCentralSignature) {
      return Status::Error(where + ": truncated or not a central directory entry");
    }
    const size_t name_len = U16(c, at + 28);
    const size_t extra_len = U16(c, at + 30);
    const size_t comment_len = U16(c, at + 32);
    if (c.size() - at - kCentralBytes < name_len + extra_len + comment_len) {
      return Status::Error(where + ": runs past the central directory");
    }
    Entry entry;
    entry.flags = U16(c, at + 8);
    entry.method = U16(c, at + 10);
    entry.crc = U32(c, at + 16);
    entry.compressed = U32(c, at + 20);
    entry.uncompressed = U32(c, at + 24);
    entry.local_offset = U32(c, at + 42);
    entry.name = std::string(c.substr(at + kCentralBytes, name_len));
    Status s = ApplyZip64Extra(c.substr(at + kCentralBytes + name_len, extra_len),
                               &entry.uncompressed, &entry.compressed, &entry.local_offset);
    if (!s.ok()) return s.WithContext(where + " (" + entry.name + ")");
    entries.push_back(std::move(entry));
    at += kCentralBytes + name_len + extra_len + comment_len;
  }
  return ZipArchive(path, std::move(*file), std::move(entries));
}

std::vector<std::string> ZipArchive::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

bool ZipArchive::Has(const std::string& name) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const Entry& e) { return e.name == name; });
}

StatusOr<std::vector<uint8_t>> ZipArchive::Read(const std::string& name, uint64_t max_bytes) const {
  const std::string context = "zip archive " + path_ + ": entry " + name;
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return e.name == name; });
  if (it == entries_.end()) return Status::Error(context + ": not in the archive");
  const Entry& e = *it;
  if ((e.flags & 1) != 0) return Status::Error(context + ": is encrypted");
  if (e.method != 0 && e.method != 8) {
    return Status::Error(context + ": compression method " + std::to_string(e.method) +
                         " is not supported (only stored and deflated)");
  }
  if (e.uncompressed > max_bytes) {
    return Status::Error(context + ": " + std::to_string(e.uncompressed) +
                         " bytes uncompressed, over the limit of " + std::to_string(max_bytes));
  }
  auto local = ReadRange(file_, e.local_offset, kLocalBytes);
  if (!local.ok()) return local.status().WithContext(context + ": local header");
  if (U32(Chars(*local), 0) != kLocalSignature) {
    return Status::Error(context + ": no local header at offset " + std::to_string(e.local_offset));
  }
  const uint64_t data_offset =
      e.local_offset + kLocalBytes + U16(Chars(*local), 26) + U16(Chars(*local), 28);
  if (data_offset > file_.size() || e.compressed > file_.size() - data_offset) {
    return Status::Error(context + ": truncated: its " + std::to_string(e.compressed) +
                         " bytes at offset " + std::to_string(data_offset) +
                         " pass the end of the file (" + std::to_string(file_.size()) + " bytes)");
  }
  std::vector<uint8_t> out;
  if (e.method == 0) {
    if (e.compressed != e.uncompressed) {
      return Status::Error(context + ": stored, yet its sizes differ (" +
                           std::to_string(e.compressed) + " and " + std::to_string(e.uncompressed) +
                           ")");
    }
    out.resize(e.uncompressed);
    TJ_RETURN_IF_ERROR(file_.ReadAt(data_offset, out).WithContext(context));
  } else {
    out.resize(e.uncompressed);
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
      return Status::Error(context + ": zlib could not start");
    }
    std::vector<uint8_t> chunk(1 << 20);
    uint64_t consumed = 0;
    int rc = Z_OK;
    uint8_t none = 0;  // zlib wants an output pointer even for an empty entry
    z.next_out = out.empty() ? &none : out.data();
    z.avail_out = 0;
    uint64_t produced = 0;
    while (rc != Z_STREAM_END) {
      if (z.avail_in == 0 && consumed < e.compressed) {
        const size_t n =
            static_cast<size_t>(std::min<uint64_t>(chunk.size(), e.compressed - consumed));
        Status s = file_.ReadAt(data_offset + consumed, std::span<uint8_t>(chunk.data(), n));
        if (!s.ok()) {
          inflateEnd(&z);
          return s.WithContext(context);
        }
        consumed += n;
        z.next_in = chunk.data();
        z.avail_in = static_cast<uInt>(n);
      }
      // Output in pieces of at most 1 GiB (avail_out is 32 bits); past the declared size,
      // none: a stream that wants more is an error, not a larger buffer.
      if (z.avail_out == 0) {
        const uint64_t room = e.uncompressed - produced;
        z.next_out = out.empty() ? &none : out.data() + produced;
        z.avail_out = static_cast<uInt>(std::min<uint64_t>(room, uint64_t{1} << 30));
      }
      const uInt before = z.avail_out;
      const bool input_left = z.avail_in > 0 || consumed < e.compressed;
      rc = inflate(&z, Z_NO_FLUSH);
      produced += before - z.avail_out;
      if (rc == Z_STREAM_END) break;
      if (rc == Z_BUF_ERROR && z.avail_out == 0 && produced == e.uncompressed) {
        inflateEnd(&z);
        return Status::Error(context + ": inflates to more than its declared " +
                             std::to_string(e.uncompressed) + " bytes");
      }
      if ((rc != Z_OK && rc != Z_BUF_ERROR) || (rc == Z_BUF_ERROR && !input_left)) {
        inflateEnd(&z);
        return Status::Error(
            context + ": corrupt deflate data" +
            (z.msg != nullptr ? std::string(" (") + z.msg + ")" : std::string(" (truncated)")));
      }
    }
    inflateEnd(&z);
    if (produced != e.uncompressed) {
      return Status::Error(context + ": inflates to " + std::to_string(produced) +
                           " bytes, not its declared " + std::to_string(e.uncompressed));
    }
  }
  uLong crc = crc32(0L, Z_NULL, 0);
  for (uint64_t at = 0; at < out.size(); at += uint64_t{1} << 30) {
    const uint64_t n = std::min<uint64_t>(out.size() - at, uint64_t{1} << 30);
    crc = crc32(crc, out.data() + at, static_cast<uInt>(n));
  }
  if (static_cast<uint32_t>(crc) != e.crc) {
    return Status::Error(context + ": its CRC-32 does not match (a corrupt archive)");
  }
  return out;
}

}  // namespace tj::data
