// Kubernetes timestamps: metav1.Time ("2006-01-02T15:04:05Z") and metav1.MicroTime
// ("2006-01-02T15:04:05.000000Z"), always UTC. Wall time, which is only written into objects;
// decisions (expiry, backoff) use tj::Clock.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace tj::kube {

using WallTime = std::chrono::system_clock::time_point;

std::string FormatTime(WallTime t);                       // seconds precision
std::string FormatMicroTime(WallTime t);                  // microseconds
std::optional<WallTime> ParseTime(const std::string& s);  // either form

}  // namespace tj::kube
