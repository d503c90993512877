// TFRecord files, read record by record with every check TensorFlow's own reader makes. A
// record is framed as
//
//   uint64 length | uint32 masked CRC-32C of the length's 8 bytes | length bytes of data |
//   uint32 masked CRC-32C of the data                       (integers little-endian)
//
// (masking: common/crc32c.h). Both CRCs are verified and the length is bounded before anything
// is allocated for it. Uncompressed files only: a gzip- or zlib-compressed file is refused with
// a message saying so.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/sha256.h"
#include "common/status.h"
#include "trainer/data/file_reader.h"

namespace tj::data {

class TfRecordReader {
 public:
  // Opens `path`; records longer than `max_record_bytes` are refused.
  static StatusOr<TfRecordReader> Open(const std::string& path, uint64_t max_record_bytes);

  // The next record's data into `record` and its offset in the file into `data_offset`;
  // false at a clean end of the file. Errors name the file, the record's number (from 0) and
  // its offset: a truncated header or record, a CRC that does not match, a length over the
  // limit. Every byte read (the whole file, by the end) also goes into `digest` when given.
  StatusOr<bool> Next(std::vector<uint8_t>* record, uint64_t* data_offset,
                      Sha256* digest = nullptr);

  int records_read() const { return records_; }
  // The open file, for positioned reads of the records later; the reader is done with.
  RandomAccessFile TakeFile() && { return std::move(file_); }
  const std::string& path() const { return path_; }

 private:
  TfRecordReader(std::string path, RandomAccessFile file, uint64_t max_record_bytes)
      : path_(std::move(path)), file_(std::move(file)), max_record_bytes_(max_record_bytes) {}
  std::string path_;
  RandomAccessFile file_;
  uint64_t max_record_bytes_;
  uint64_t offset_ = 0;
  int records_ = 0;
};

// The framing of one record around `data`: what TensorFlow's TFRecordWriter writes.
std::string FrameTfRecord(std::span<const uint8_t> data);

}  // namespace tj::data
