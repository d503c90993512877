// The files of tests: a fresh directory per test (TempDir), removed with what is in it at
// destruction, or a small tmpfs for a full disk (SmallTmpfs); whole-file reads and writes; and
// what a temporary file (a test's captured log) holds so far. Header-only.
#pragma once

#include <stdlib.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tj::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "tj-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("mkdtemp " + tmpl + " failed: is the temp directory writable?");
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }
  std::string operator/(const std::string& name) const { return Join(name); }
  // Writes `content` to Join(name), creating its directories; returns that path.
  std::string Write(const std::string& name, const std::string& content) const {
    std::string p = Join(name);
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
    return p;
  }

 private:
  std::string path_;
};

// A tmpfs of `bytes` mounted on a fresh directory, for tests of a full disk (ENOSPC) with
// real files. Needs root (CAP_SYS_ADMIN): `error()` says why when it could not mount.
class SmallTmpfs {
 public:
  explicit SmallTmpfs(size_t bytes) {
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0755";
    if (::mount("tj-test-tmpfs", dir_.path().c_str(), "tmpfs", 0, options.c_str()) != 0) {
      error_ = std::string("mounting a small tmpfs needs root: ") + std::strerror(errno);
    }
  }
  ~SmallTmpfs() {
    if (error_.empty()) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  const std::string& error() const { return error_; }
  const std::string& path() const { return dir_.path(); }
  std::string Join(const std::string& name) const { return dir_.Join(name); }

 private:
  TempDir dir_;
  std::string error_;
};

// The whole file at `path`; "" when it cannot be read.
inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Replaces the file at `path` with `bytes` (its directory must exist); false when it could not
// write them all.
inline bool WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  out.close();
  return static_cast<bool>(out);
}

// What was written to a temporary file (std::tmpfile) so far, as a test's captured log.
inline std::string ReadAll(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

}  // namespace tj::testing
