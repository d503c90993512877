// Durations as error messages and log lines write them: "0.5 s", "300 s".
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace tj {

inline std::string FormatSeconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace tj
