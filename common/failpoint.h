// Failpoints: named places in the code where a fault test makes the process pause or exit at
// a precise moment (e.g. between writing a backup's temporary file and renaming it), so the
// test can kill it there deterministically. Set per process from the environment:
//
//   TJ_FAILPOINTS="<name>=<action>[@<n>][%<gang>][;<name>=<action>[@<n>][%<gang>]...]"
//   <action>: sleep:<ms>   pause this thread for <ms> milliseconds
//             exit:<code>  end the process at once with <code> (_exit, nothing flushed)
//             fill:<MiB>   allocate <MiB> mebibytes and write to every page, never freed: in
//                          a container whose memory limit that exceeds, the kernel's OOM kill
//   @<n>:     act only on the n-th time this process reaches the point (1-based); without it,
//             every time.
//   %<gang>:  act only in the process of that gang (TJ_RESTART_COUNT, set by the operator);
//             without it, in every gang.
//
// Example: TJ_FAILPOINTS=backup.before_rename=sleep:3000@2 pauses the second backup write of
// the process for 3 s after its temporary file is complete. Each time a point acts it says so
// on stderr ("failpoint <name>: ..."), which is what a test waits for.
//
// The variable is read once, at the first Hit() of any point; when it is unset a Hit() costs
// one load of an initialized static. A malformed value ends the process with exit code 2 and
// a message naming the entry, so a test never runs silently without its fault. Thread-safe.
//
// Points: backup.before_rename (trainer/checkpoint/backup_manager.cpp); train.step
// (trainer/train/training_loop.cpp: before each step's gradients); train.after_end (training
// done, train_end logged, the process about to exit 0).
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
  enum class Action { kSleep, kExit, kFill };
  std::string name;
  Action action = Action::kSleep;
  long arg = 0;    // milliseconds, the exit code, or mebibytes
  long nth = 0;    // 0: every time
  long gang = -1;  // -1: every gang
  std::atomic<long> hits{0};
};

[[noreturn]] inline void BadSpec(const std::string& entry, const char* why) {
  std::fprintf(stderr,
               "TJ_FAILPOINTS: bad entry '%s': %s (expected <name>=sleep:<ms>, "
               "<name>=exit:<code> or <name>=fill:<MiB>, optionally followed by @<n> and "
               "%%<gang>, entries separated by ';')\n",
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
    if (const size_t pct = action.find('%'); pct != std::string_view::npos) {
      if (!ParseNumber(action.substr(pct + 1), &p->gang)) {
        BadSpec(entry, "%<gang> must be a non-negative integer");
      }
      action = action.substr(0, pct);
    }
    if (const size_t at = action.find('@'); at != std::string_view::npos) {
      if (!ParseNumber(action.substr(at + 1), &p->nth) || p->nth == 0) {
        BadSpec(entry, "@<n> must be a positive integer");
      }
      action = action.substr(0, at);
    }
    const size_t colon = action.find(':');
    const std::string_view kind = action.substr(0, colon);
    if (colon == std::string_view::npos || (kind != "sleep" && kind != "exit" && kind != "fill")) {
      BadSpec(entry, "unknown action");
    }
    p->action = kind == "exit"   ? Point::Action::kExit
                : kind == "fill" ? Point::Action::kFill
                                 : Point::Action::kSleep;
    const bool exit = p->action == Point::Action::kExit;
    if (!ParseNumber(action.substr(colon + 1), &p->arg) || (exit && p->arg > 255)) {
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

// This process's gang (TJ_RESTART_COUNT); -1 when unset or not a count.
inline long Gang() {
  static const long gang = [] {
    long g = -1;
    const char* v = std::getenv("TJ_RESTART_COUNT");
    return v != nullptr && ParseNumber(v, &g) ? g : -1L;
  }();
  return gang;
}

// Allocates `mib` MiB and writes to every page, kept until the process ends (reachable, so
// that neither the allocation nor the writes can be left out).
inline void Fill(long mib) {
  constexpr size_t kChunk = size_t{1} << 20;
  static std::vector<std::unique_ptr<char[]>> kept;  // NOLINT(*-avoid-c-arrays)
  for (long i = 0; i < mib; ++i) {
    kept.push_back(std::make_unique_for_overwrite<char[]>(kChunk));  // NOLINT(*-avoid-c-arrays)
    for (size_t b = 0; b < kChunk; b += 4096) kept.back()[b] = 1;
  }
}

}  // namespace internal

// Reached the point `name`: acts as TJ_FAILPOINTS says, if it names this point.
inline void Hit(std::string_view name) {
  const auto& points = internal::Points();
  if (points.empty()) return;
  for (const auto& p : points) {
    if (p->name != name) continue;
    if (p->gang >= 0 && p->gang != internal::Gang()) continue;
    const long hit = ++p->hits;
    if (p->nth != 0 && hit != p->nth) continue;
    using Action = internal::Point::Action;
    const char* what = p->action == Action::kExit   ? "exit"
                       : p->action == Action::kFill ? "fill"
                                                    : "sleep";
    const char* unit = p->action == Action::kFill    ? " MiB"
                       : p->action == Action::kSleep ? " ms"
                                                     : "";
    std::fprintf(stderr, "failpoint %s: %s %ld%s (hit %ld)\n", p->name.c_str(), what, p->arg, unit,
                 hit);
    std::fflush(stderr);
    switch (p->action) {
      case Action::kExit:
        ::_exit(static_cast<int>(p->arg));
      case Action::kFill:
        internal::Fill(p->arg);
        break;
      case Action::kSleep:
        std::this_thread::sleep_for(std::chrono::milliseconds(p->arg));
        break;
    }
  }
}

}  // namespace tj::failpoint
