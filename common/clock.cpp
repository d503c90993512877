#include "common/clock.h"

#include <thread>

namespace tj {

Clock::TimePoint RealClock::Now() const { return std::chrono::steady_clock::now(); }
void RealClock::SleepFor(Duration d) { std::this_thread::sleep_for(d); }
RealClock* RealClock::Get() {
  static RealClock clock;
  return &clock;
}

Clock::TimePoint FakeClock::Now() const {
  MutexLock lock(mu_);
  return now_;
}
void FakeClock::Advance(Duration d) {
  MutexLock lock(mu_);
  now_ += d;
}

}  // namespace tj
