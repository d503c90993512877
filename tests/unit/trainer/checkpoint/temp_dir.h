// Test helpers of checkpoint files: tests/support/temp_dir.h and a small tmpfs (a full disk).
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "tests/support/temp_dir.h"

namespace tj::checkpoint::testing {

using tj::testing::ReadBytes;
using tj::testing::TempDir;
using tj::testing::WriteBytes;

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

}  // namespace tj::checkpoint::testing
