// Client-side request rate limit: a token bucket of `burst` tokens refilled at `qps` per second
// (client-go's defaults are 5 QPS, burst 10). Time comes from a tj::Clock. Thread-safe.
#pragma once

#include <mutex>

#include "common/clock.h"
#include "common/thread_annotations.h"

namespace tj::kube {

class TokenBucket {
 public:
  // qps <= 0 means no limit.
  TokenBucket(double qps, int burst, Clock* clock);

  // Takes one token and returns how long the caller must wait before using it (0 when one
  // was available). Reservations queue up: each call waits behind the earlier ones.
  Clock::Duration Reserve();
  // Reserve(), then sleeps through the clock.
  void Wait();

 private:
  double qps_;
  double burst_;
  Clock* clock_;
  Mutex mu_;
  double tokens_ TJ_GUARDED_BY(mu_);
  Clock::TimePoint last_ TJ_GUARDED_BY(mu_);
};

}  // namespace tj::kube
