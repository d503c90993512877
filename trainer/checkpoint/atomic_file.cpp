#include "trainer/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/failpoint.h"

namespace tj::checkpoint {
namespace {

constexpr std::string_view kTempMarker = ".tmp.";

std::string ErrnoText(int err) { return std::strerror(err); }

// An I/O error; out of space gets its own code, so that callers can try again later.
Status IoError(int err, const std::string& what) {
  const bool no_space = err == ENOSPC || err == EDQUOT || err == EFBIG;
  return Status::Error(no_space ? StatusCode::kResourceExhausted : StatusCode::kUnknown,
                       what + ": " + ErrnoText(err) + (no_space ? " (disk full?)" : ""));
}

Status WriteAll(int fd, std::string_view bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(errno, "write");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status FsyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Error("opening directory " + dir + ": " + ErrnoText(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); the rename is then as durable as
  // that file system makes it.
  if (rc != 0 && err != EINVAL)
    return Status::Error("fsync of directory " + dir + ": " + ErrnoText(err));
  return Status::Ok();
}

}  // namespace

bool IsTempFileName(std::string_view name) {
  return name.size() > 1 && name[0] == '.' && name.find(kTempMarker) != std::string_view::npos;
}

std::string_view TempFileWriter(std::string_view name) {
  if (!IsTempFileName(name)) return {};
  std::string_view rest = name.substr(name.find(kTempMarker) + kTempMarker.size());
  const size_t dot = rest.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : rest.substr(0, dot);
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                           std::string_view before_rename_failpoint, std::string_view writer) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const std::string base = target.filename().string();
  if (base.empty()) return Status::Error("writing " + path + ": not a file name");

  for (char c : writer) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') {
      return Status::Error("writing " + path + ": bad writer name \"" + std::string(writer) + "\"");
    }
  }
  const std::string writer_part = writer.empty() ? "" : std::string(writer) + ".";
  std::string tmpl =
      (fs::path(dir) / ("." + base + std::string(kTempMarker) + writer_part + "XXXXXX")).string();
  std::vector<char> tmp_name(tmpl.begin(), tmpl.end());
  tmp_name.push_back('\0');
  int fd = ::mkstemp(tmp_name.data());
  if (fd < 0) {
    const int err = errno;
    Status error = IoError(err, "writing " + path + ": cannot create a temporary file in " + dir);
    if (error.code() == StatusCode::kResourceExhausted) return error;
    return Status::Error(error.message() + " (does the directory exist and is it writable?)");
  }
  const std::string tmp(tmp_name.data());
  auto fail = [&](const Status& error) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return error.WithContext("writing " + path);
  };
  if (::fchmod(fd, 0644) != 0) return fail(IoError(errno, "chmod of " + tmp));
  if (Status s = WriteAll(fd, bytes); !s.ok()) return fail(s);
  if (::fsync(fd) != 0) return fail(IoError(errno, "fsync of " + tmp));
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) return fail(IoError(errno, "close of " + tmp));
  if (!before_rename_failpoint.empty()) failpoint::Hit(before_rename_failpoint);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return fail(IoError(errno, "rename of " + tmp + " to " + path));
  }
  return FsyncDirectory(dir).WithContext("writing " + path);
}

Status RemoveTempFiles(const std::string& dir,
                       const std::function<bool(std::string_view writer)>& remove) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::Ok();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!IsTempFileName(name) || (remove && !remove(TempFileWriter(name)))) continue;
    std::error_code rm_ec;
    fs::remove(it->path(), rm_ec);
    if (rm_ec) {
      return Status::Error("removing leftover temporary file " + it->path().string() + ": " +
                           rm_ec.message());
    }
  }
  if (ec) return Status::Error("listing " + dir + ": " + ec.message());
  return Status::Ok();
}

}  // namespace tj::checkpoint
