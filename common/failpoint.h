// Failpoints: named places in the code where a fault test makes the process pause or exit at
// a precise moment (e.g. between writing a backup's temporary file and renaming it), so the
// test can kill it there deterministically. Set per process from the environment:
//
//   TJ_FAILPOINTS="<name>=<action>[@<n>][;<name>=<action>[@<n>]...]"
//   <action>: sleep:<ms>   pause this thread for <ms> milliseconds
//             exit:<code>  end the process at once with <code> (_exit, nothing flushed)
//   @<n>:     act only on the n-th time this process reaches the point (1-based); without it,
//             every time.
//
// Example: TJ_FAILPOINTS=backup.before_rename=sleep:3000@2 pauses the second backup write of
// the process for 3 s after its temporary file is complete. Each time a point acts it says so
// on stderr ("failpoint <name>: ..."), which is what a test waits for.
//
// The variable is read once, at the first Hit() of any point; when it is unset a Hit() costs
// one load of an initialized static. A malformed value ends the process with exit code 2 and
// a message naming the entry, so a test never runs silently without its fault. Thread-safe.
//
// Points: backup.before_rename (trainer/checkpoint/backup_manager.cpp); train.after_end
// (trainer/train/training_loop.cpp: training done, train_end logged, the process about to
// exit 0).
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace tj::failpoint {

namespace internal {

struct Point {
  std::string name;
  bool exit = false;  // else sleep
  long arg = 0;       // milliseconds, or the exit code
  long nth = 0;       // 0: every time
  std::atomic<long> hits{0};
};

[[noreturn]] inline void BadSpec(const std::string& entry, const char* why) {
  std::fprintf(stderr,
               "TJ_FAILPOINTS: bad entry '%s': %s (expected <name>=sleep:<ms> or "
               "<name>=exit:<code>, optionally followed by @<n>, entries separated by ';')\n",
               entry.c_str(), why);
  std::fflush(stderr);
  ::_exit(2);
}

inline bool ParseNumber(std::string_view s, long* out) {
  if (s.empty() || s.size() > 9) return false;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

inline std::vector<std::unique_ptr<Point>> Parse(const char* spec) {
  std::vector<std::unique_ptr<Point>> points;
  if (spec == nullptr) return points;
  std::string_view rest(spec);
  while (!rest.empty()) {
    const size_t semi = rest.find(';');
    const std::string entry(rest.substr(0, semi));
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    if (entry.empty()) continue;
    auto p = std::make_unique<Point>();
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) BadSpec(entry, "no <name>=");
    p->name = entry.substr(0, eq);
    std::string_view action = std::string_view{entry}.substr(eq + 1);
    if (const size_t at = action.find('@'); at != std::string_view::npos) {
      if (!ParseNumber(action.substr(at + 1), &p->nth) || p->nth == 0) {
        BadSpec(entry, "@<n> must be a positive integer");
      }
      action = action.substr(0, at);
    }
    const size_t colon = action.find(':');
    const std::string_view kind = action.substr(0, colon);
    if (colon == std::string_view::npos || (kind != "sleep" && kind != "exit")) {
      BadSpec(entry, "unknown action");
    }
    p->exit = kind == "exit";
    if (!ParseNumber(action.substr(colon + 1), &p->arg) || (p->exit && p->arg > 255)) {
      BadSpec(entry, "the argument must be a non-negative integer (an exit code is <= 255)");
    }
    points.push_back(std::move(p));
  }
  return points;
}

inline const std::vector<std::unique_ptr<Point>>& Points() {
  static const std::vector<std::unique_ptr<Point>> points = Parse(std::getenv("TJ_FAILPOINTS"));
  return points;
}

}  // namespace internal

// Reached the point `name`: acts as TJ_FAILPOINTS says, if it names this point.
inline void Hit(std::string_view name) {
  const auto& points = internal::Points();
  if (points.empty()) return;
  for (const auto& p : points) {
    if (p->name != name) continue;
    const long hit = ++p->hits;
    if (p->nth != 0 && hit != p->nth) continue;
    std::fprintf(stderr, "failpoint %s: %s %ld%s (hit %ld)\n", p->name.c_str(),
                 p->exit ? "exit" : "sleep", p->arg, p->exit ? "" : " ms", hit);
    std::fflush(stderr);
    if (p->exit) ::_exit(static_cast<int>(p->arg));
    std::this_thread::sleep_for(std::chrono::milliseconds(p->arg));
  }
}

}  // namespace tj::failpoint
