// An EventLog whose output goes to temporary files, read back as text, for tests of what a
// component logs.
#pragma once

#include <cstdio>
#include <string>

#include "common/event_log.h"
#include "tests/support/temp_dir.h"

namespace tj::testing {

// An EventLog (JSON lines) whose stdout and stderr are kept in temporary files.
class CapturedLog {
 public:
  CapturedLog() : out_(std::tmpfile()), err_(std::tmpfile()), log_(LogFormat::kJson, out_, err_) {}
  ~CapturedLog() {
    std::fclose(out_);
    std::fclose(err_);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  EventLog* log() { return &log_; }
  // What it wrote so far.
  std::string Stdout() { return ReadAll(out_); }
  std::string Stderr() { return ReadAll(err_); }

 private:
  FILE* out_;
  FILE* err_;
  EventLog log_;
};

}  // namespace tj::testing
