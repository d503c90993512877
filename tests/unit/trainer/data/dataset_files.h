// The files the dataset tests read, written byte by byte here rather than by the code under
// test: .npy arrays, zip archives (stored or deflated, as numpy.savez and savez_compressed),
// and images with a pattern that survives JPEG roughly and PNG exactly. Header-only.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/little_endian.h"
#include "trainer/data/dataset.h"

namespace tj::data::testing {

// An .npy (format 1.0) of `data` with the given header fields, padded as NumPy pads it.
inline std::string NpyBytes(const std::string& descr, const std::vector<uint64_t>& shape,
                            const std::string& data, const std::string& fortran = "False") {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(1);
  out.push_back(0);
  AppendLittleEndian<uint16_t>(out, static_cast<uint16_t>(header.size()));
  return out + header + data;
}

inline std::string RawDeflate(const std::string& data) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A zip archive of `entries` (name, bytes). zip64_local: each local header carries sizes of
// 0xffffffff and a zip64 extra field, as NumPy's savez writes them.
inline std::string ZipBytes(const std::vector<std::pair<std::string, std::string>>& entries,
                            bool deflate, bool zip64_local = false) {
  std::string out;
  std::string central;
  for (const auto& [name, data] : entries) {
    const std::string stored = deflate ? RawDeflate(data) : data;
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    std::string extra;
    if (zip64_local) {
      AppendLittleEndian<uint16_t>(extra, 1);
      AppendLittleEndian<uint16_t>(extra, 16);
      AppendLittleEndian<uint64_t>(extra, data.size());
      AppendLittleEndian<uint64_t>(extra, stored.size());
    }
    AppendLittleEndian<uint32_t>(out, 0x04034b50);
    AppendLittleEndian<uint16_t>(out, zip64_local ? 45 : 20);
    AppendLittleEndian<uint16_t>(out, 0);
    AppendLittleEndian<uint16_t>(out, deflate ? 8 : 0);
    AppendLittleEndian<uint32_t>(out, 0);  // time, date
    AppendLittleEndian<uint32_t>(out, crc);
    AppendLittleEndian<uint32_t>(out, zip64_local ? 0xffffffffu : stored.size());
    AppendLittleEndian<uint32_t>(out, zip64_local ? 0xffffffffu : data.size());
    AppendLittleEndian<uint16_t>(out, static_cast<uint16_t>(name.size()));
    AppendLittleEndian<uint16_t>(out, static_cast<uint16_t>(extra.size()));
    out += name + extra + stored;

    AppendLittleEndian<uint32_t>(central, 0x02014b50);
    AppendLittleEndian<uint16_t>(central, 20);
    AppendLittleEndian<uint16_t>(central, 20);
    AppendLittleEndian<uint16_t>(central, 0);
    AppendLittleEndian<uint16_t>(central, deflate ? 8 : 0);
    AppendLittleEndian<uint32_t>(central, 0);
    AppendLittleEndian<uint32_t>(central, crc);
    AppendLittleEndian<uint32_t>(central, stored.size());
    AppendLittleEndian<uint32_t>(central, data.size());
    AppendLittleEndian<uint16_t>(central, static_cast<uint16_t>(name.size()));
    AppendLittleEndian<uint16_t>(central, 0);  // extra
    AppendLittleEndian<uint16_t>(central, 0);  // comment
    AppendLittleEndian<uint16_t>(central, 0);  // disk
    AppendLittleEndian<uint16_t>(central, 0);  // internal attributes
    AppendLittleEndian<uint32_t>(central, 0);  // external attributes
    AppendLittleEndian<uint32_t>(central, offset);
    central += name;
  }
  const uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out += central;
  AppendLittleEndian<uint32_t>(out, 0x06054b50);
  AppendLittleEndian<uint32_t>(out, 0);  // disks
  AppendLittleEndian<uint16_t>(out, static_cast<uint16_t>(entries.size()));
  AppendLittleEndian<uint16_t>(out, static_cast<uint16_t>(entries.size()));
  AppendLittleEndian<uint32_t>(out, static_cast<uint32_t>(central.size()));
  AppendLittleEndian<uint32_t>(out, cd_offset);
  AppendLittleEndian<uint16_t>(out, 0);
  return out;
}

// A smooth pattern that differs per `seed`: gradients and a light grey square, the kind of
// image JPEG keeps close (within a few levels) and PNG exactly.
inline std::vector<uint8_t> PatternImage(ImageShape shape, int seed) {
  std::vector<uint8_t> p(shape.Size());
  for (int y = 0; y < shape.height; ++y) {
    for (int x = 0; x < shape.width; ++x) {
      for (int c = 0; c < shape.channels; ++c) {
        int v = 10 + x * 150 / shape.width + y * 60 / shape.height + (seed % 5) * 5 + c * 5;
        if (x > shape.width / 4 && x < shape.width / 2 && y > shape.height / 4 &&
            y < shape.height / 2) {
          v = 200;
        }
        p[(static_cast<size_t>(y) * shape.width + x) * shape.channels + c] =
            static_cast<uint8_t>(v);
      }
    }
  }
  return p;
}

inline std::string AsString(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace tj::data::testing
