#include "trainer/data/file_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace tj::data {
namespace {

Status ErrnoError(const std::string& what) {
  return Status::Error(what + ": " + std::strerror(errno));
}

// Opens `path` for reading and checks that it is a regular file; its size in `size`.
StatusOr<int> OpenRegular(const std::string& path, uint64_t* size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = ErrnoError("cannot stat");
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error(S_ISDIR(st.st_mode) ? "is a directory, not a file"
                                             : "is not a regular file");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace

StatusOr<std::vector<uint8_t>> ReadFileBounded(const std::string& path, uint64_t max_bytes) {
  uint64_t size = 0;
  auto fd = OpenRegular(path, &size);
  if (!fd.ok()) return fd.status();
  if (size > max_bytes) {
    ::close(*fd);
    return Status::Error("holds " + std::to_string(size) + " bytes, over the limit of " +
                         std::to_string(max_bytes));
  }
  // One byte more than expected: reading it means the file grew meanwhile.
  std::vector<uint8_t> out(size + 1);
  uint64_t have = 0;
  while (have < out.size()) {
    ssize_t n = ::read(*fd, out.data() + have, out.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = ErrnoError("cannot read");
      ::close(*fd);
      return s;
    }
    if (n == 0) break;
    have += static_cast<uint64_t>(n);
  }
  ::close(*fd);
  if (have > size) return Status::Error("grew while being read");
  out.resize(have);
  return out;
}

StatusOr<RandomAccessFile> RandomAccessFile::Open(const std::string& path) {
  uint64_t size = 0;
  auto fd = OpenRegular(path, &size);
  if (!fd.ok()) return fd.status();
  return RandomAccessFile(*fd, size);
}

RandomAccessFile::RandomAccessFile(RandomAccessFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

RandomAccessFile& RandomAccessFile::operator=(RandomAccessFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

RandomAccessFile::~RandomAccessFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status RandomAccessFile::ReadAt(uint64_t offset, std::span<uint8_t> out) const {
  if (offset > size_ || out.size() > size_ - offset) {
    return Status::Error("truncated: " + std::to_string(out.size()) + " bytes at offset " +
                         std::to_string(offset) + " pass the end of the file (" +
                         std::to_string(size_) + " bytes)");
  }
  size_t have = 0;
  while (have < out.size()) {
    ssize_t n =
        ::pread(fd_, out.data() + have, out.size() - have, static_cast<off_t>(offset + have));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot read at offset " + std::to_string(offset + have));
    if (n == 0) {
      return Status::Error("truncated: the file ends at offset " + std::to_string(offset + have) +
                           " (it shrank while being read)");
    }
    have += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace tj::data
