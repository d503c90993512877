// The entries of a zip archive, for NumPy's .npz files (numpy.savez: stored; savez_compressed:
// deflated, through zlib). Reads the central directory (zip64 included: NumPy writes its
// entries with zip64 headers), then each entry on request, bounded: the declared sizes are
// checked against the file and the caller's limit before anything is allocated, inflated output
// is cut off at the declared size, and the CRC-32 is verified. Encrypted entries, archives on
// several disks and compression methods other than stored and deflated are refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data/file_reader.h"

namespace tj::data {

class ZipArchive {
 public:
  static StatusOr<ZipArchive> Open(const std::string& path);

  // The entries' names in the order of the central directory.
  std::vector<std::string> names() const;
  bool Has(const std::string& name) const;
  // The uncompressed bytes of entry `name`; an error when it is missing, larger than
  // `max_bytes`, damaged (a CRC or a size that does not match, a bad deflate stream) or
  // stored in a way this reader does not read.
  StatusOr<std::vector<uint8_t>> Read(const std::string& name, uint64_t max_bytes) const;

 private:
  struct Entry {
    std::string name;
    uint16_t flags = 0;
    uint16_t method = 0;
    uint32_t crc = 0;
    uint64_t compressed = 0;
    uint64_t uncompressed = 0;
    uint64_t local_offset = 0;
  };
  ZipArchive(std::string path, RandomAccessFile file, std::vector<Entry> entries)
      : path_(std::move(path)), file_(std::move(file)), entries_(std::move(entries)) {}

  std::string path_;
  RandomAccessFile file_;
  std::vector<Entry> entries_;
};

}  // namespace tj::data
