// An injectable time source, so backoff, deadlines, leases and polling are testable
// without waiting. RealClock is the process's clock; tests use FakeClock.
#pragma once

#include <chrono>
#include <mutex>

#include "common/thread_annotations.h"

namespace tj {

class Clock {
 public:
  using Duration = std::chrono::steady_clock::duration;
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  virtual void SleepFor(Duration d) = 0;
};

class RealClock final : public Clock {
 public:
  TimePoint Now() const override;
  void SleepFor(Duration d) override;
  static RealClock* Get();  // a process-wide instance; stateless, so not "mutable state"
};

// A clock that moves only when told to (SleepFor advances it at once). Thread-safe.
class FakeClock final : public Clock {
 public:
  TimePoint Now() const override;
  void SleepFor(Duration d) override { Advance(d); }
  void Advance(Duration d);

 private:
  mutable Mutex mu_;
  TimePoint now_ TJ_GUARDED_BY(mu_) = {};
};

// Seconds between two time points as a double.
inline double SecondsBetween(Clock::TimePoint a, Clock::TimePoint b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace tj
