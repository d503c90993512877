#include "common/process_metrics.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace tj {
namespace {

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The fields of /proc/<pid>/stat after "(comm)", which may itself hold spaces and parentheses:
// fields[0] is field 3 (state).
std::vector<std::string> StatFields(const std::string& stat) {
  std::vector<std::string> fields;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return fields;
  std::istringstream in(stat.substr(close + 1));
  for (std::string f; in >> f;) fields.push_back(f);
  return fields;
}

std::optional<double> Number(const std::string& text) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used != text.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

void RenderProcessMetrics(PrometheusText* out, const std::string& proc, const std::string& pid) {
  const std::string dir = proc + "/" + pid;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  if (auto stat = ReadFile(dir + "/stat")) {
    const auto f = StatFields(*stat);
    // Fields 14 utime, 15 stime, 22 starttime (ticks since boot), 23 vsize, 24 rss (pages).
    if (f.size() >= 22) {
      auto utime = Number(f[11]), stime = Number(f[12]);
      if (utime && stime) {
        out->Counter("process_cpu_seconds_total",
                     "Total user and system CPU time spent in seconds.", (*utime + *stime) / ticks);
      }
      if (auto vsize = Number(f[20])) {
        out->Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", *vsize);
      }
      if (auto rss = Number(f[21])) {
        out->Gauge("process_resident_memory_bytes", "Resident memory size in bytes.", *rss * page);
      }
      std::optional<double> btime;
      if (auto s = ReadFile(proc + "/stat")) {
        std::istringstream in(*s);
        for (std::string line; std::getline(in, line);) {
          if (line.rfind("btime ", 0) == 0) btime = Number(line.substr(6));
        }
      }
      if (auto start = Number(f[19]); start && btime) {
        out->Gauge("process_start_time_seconds",
                   "Start time of the process since unix epoch in seconds.",
                   *btime + *start / ticks);
      }
    }
  }
  std::error_code ec;
  std::filesystem::directory_iterator it(dir + "/fd", ec);
  if (!ec) {
    double n = 0;
    for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      ++n;
    }
    out->Gauge("process_open_fds", "Number of open file descriptors.", n);
  }
  if (auto limits = ReadFile(dir + "/limits")) {
    std::istringstream in(*limits);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Max open files", 0) != 0) continue;
      std::istringstream fields(line.substr(14));
      std::string soft;
      fields >> soft;
      if (auto v = Number(soft)) {
        out->Gauge("process_max_fds", "Maximum number of open file descriptors.", *v);
      }
    }
  }
}

}  // namespace tj
