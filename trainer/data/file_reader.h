// Bounded reads of a tenant's files: a whole small file (an image) with a cap on its size, and
// positioned reads of a large one (TFRecord, .npz) that check every range against the file's
// size. Errors say what went wrong without the path: callers prefix the file and the record.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::data {

// The whole file, refused when it is not a regular file (after symbolic links) or holds more
// than `max_bytes`. Reads at most one byte more than the size the file had when opened: a file
// that grows meanwhile is an error, never a larger read.
StatusOr<std::vector<uint8_t>> ReadFileBounded(const std::string& path, uint64_t max_bytes);

// A file opened for positioned reads (pread): thread-safe, any number of threads may read at
// once. Not copyable; closes the file when destroyed.
class RandomAccessFile {
 public:
  static StatusOr<RandomAccessFile> Open(const std::string& path);
  RandomAccessFile(RandomAccessFile&& other) noexcept;
  RandomAccessFile& operator=(RandomAccessFile&& other) noexcept;
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;
  ~RandomAccessFile();

  uint64_t size() const { return size_; }
  // Reads out.size() bytes at `offset`: an error when the range passes the end of the file
  // ("truncated") or the read fails.
  Status ReadAt(uint64_t offset, std::span<uint8_t> out) const;

 private:
  RandomAccessFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace tj::data
