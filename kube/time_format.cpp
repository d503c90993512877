#include "kube/time_format.h"

#include <cstdio>
#include <ctime>

namespace tj::kube {
namespace {

std::string Format(WallTime t, bool micro) {
  auto secs = std::chrono::time_point_cast<std::chrono::seconds>(t);
  if (secs > t) secs -= std::chrono::seconds(1);
  std::time_t tt = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::string s(buf, n);
  if (micro) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(t - secs).count();
    std::snprintf(buf, sizeof(buf), ".%06lld", static_cast<long long>(us));
    s += buf;
  }
  return s + "Z";
}

}  // namespace

std::string FormatTime(WallTime t) { return Format(t, false); }
std::string FormatMicroTime(WallTime t) { return Format(t, true); }

std::optional<WallTime> ParseTime(const std::string& s) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
    return std::nullopt;
  }
  if (tm.tm_year < 1970 || tm.tm_year > kLatestYear) return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  WallTime t = std::chrono::system_clock::from_time_t(timegm(&tm));
  size_t i = static_cast<size_t>(consumed);
  if (i < s.size() && s[i] == '.') {
    ++i;
    long long frac = 0;
    int digits = 0;
    while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) {
      if (digits < 6) {
        frac = frac * 10 + (s[i] - '0');
        ++digits;
      }
      ++i;
    }
    while (digits++ < 6) frac *= 10;
    t += std::chrono::microseconds(frac);
  }
  if (i >= s.size() || s[i] != 'Z') return std::nullopt;  // the API server always writes UTC
  return t;
}

}  // namespace tj::kube
