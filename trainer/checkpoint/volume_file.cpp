#include "trainer/checkpoint/volume_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tj::checkpoint {
namespace {

std::string KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

Status NotARegularFile(const std::string& path, const std::string& kind) {
  return Status::Error(path + ": " + kind +
                       ", not a regular file: not read. tj-trainer writes only regular files "
                       "here, so something else put it on the shared volume; remove it");
}

Status TooLarge(const std::string& path, uint64_t size, size_t max_bytes) {
  return Status::Error(path + ": too large: " + std::to_string(size) + " bytes, more than the " +
                       std::to_string(max_bytes) +
                       " tj-trainer writes there; not read. Remove it if tj-trainer did not "
                       "write it");
}

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

StatusOr<std::optional<std::string>> ReadVolumeFile(const std::string& path, size_t max_bytes) {
  // lstat first, so that a device is never opened (an open can have effects); the fstat below
  // decides, as the path may be replaced between the two.
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return std::optional<std::string>();
    return Status::Error(path + ": cannot inspect it: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) return NotARegularFile(path, KindOf(st.st_mode));
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return std::optional<std::string>();
    if (err == ELOOP) return NotARegularFile(path, "a symbolic link");
    return Status::Error(path + ": cannot open: " + std::strerror(err));
  }
  FdCloser closer(fd);
  if (::fstat(fd, &st) != 0) return Status::Error(path + ": fstat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return NotARegularFile(path, KindOf(st.st_mode));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return TooLarge(path, st.st_size, max_bytes);

  // One read into a buffer of the file's size (backups are megabytes); one byte more tells a
  // file that grew past the bound while it was read.
  std::string bytes(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t have = 0;
  while (have < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + have, bytes.size() - have);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Error(path + ": read error: " + std::strerror(errno));
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
    if (have == bytes.size() && have <= max_bytes) bytes.resize(std::min(max_bytes, 2 * have) + 1);
  }
  if (have > max_bytes) return TooLarge(path, have, max_bytes);
  bytes.resize(have);
  return std::optional<std::string>(std::move(bytes));
}

StatusOr<Digest> VolumeMac(std::string_view key, const void* data, size_t size) {
  // OpenSSL is given a non-null pointer for an empty key.
  static constexpr char kNoKey[] = "";
  return HmacSha256(key.empty() ? std::string_view(kNoKey) : key, data, size);
}

}  // namespace tj::checkpoint
