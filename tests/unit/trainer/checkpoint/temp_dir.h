// A fresh directory per test, removed afterwards.
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tj::checkpoint::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tj-ckpt-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

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

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace tj::checkpoint::testing
