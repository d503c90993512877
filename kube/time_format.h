// Kubernetes timestamps: metav1.Time ("2006-01-02T15:04:05Z") and metav1.MicroTime
// ("2006-01-02T15:04:05.000000Z"), always UTC. Wall time, which is only written into objects;
// decisions (expiry, backoff) use tj::Clock.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace tj::kube {

using WallTime = std::chrono::system_clock::time_point;

std::string FormatTime(WallTime t);       // seconds precision
std::string FormatMicroTime(WallTime t);  // microseconds
// Either form. Nullopt for a malformed time and for one outside [1970, kLatestYear]:
// system_clock counts nanoseconds and wraps after 2262, so a time of the year 9999 (valid for
// the API server) cannot be held, and the latest accepted one plus a duration of up to a
// century (api::kMaxDurationSeconds) still can.
inline constexpr int kLatestYear = 2161;
std::optional<WallTime> ParseTime(const std::string& s);

}  // namespace tj::kube
