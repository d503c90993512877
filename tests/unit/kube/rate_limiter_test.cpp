#include "kube/rate_limiter.h"

#include <gtest/gtest.h>

namespace tj::kube {
namespace {

using std::chrono::milliseconds;

TEST(TokenBucket, BurstThenQps) {
  FakeClock clock;
  TokenBucket b(5, 10, &clock);  // client-go's defaults
  for (int i = 0; i < 10; ++i) EXPECT_EQ(b.Reserve(), Clock::Duration::zero()) << i;
  // The 11th waits 1/5 s, the 12th 2/5 s (reservations queue behind each other).
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(b.Reserve()), milliseconds(200));
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(b.Reserve()), milliseconds(400));
  clock.Advance(std::chrono::seconds(10));  // refills up to the burst, no more
  for (int i = 0; i < 10; ++i) EXPECT_EQ(b.Reserve(), Clock::Duration::zero()) << i;
  EXPECT_GT(b.Reserve(), Clock::Duration::zero());
}

TEST(TokenBucket, WaitSleepsOnTheClock) {
  FakeClock clock;
  TokenBucket b(10, 1, &clock);
  auto t0 = clock.Now();
  b.Wait();
  b.Wait();
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(clock.Now() - t0), milliseconds(100));
}

TEST(TokenBucket, ZeroQpsIsUnlimited) {
  FakeClock clock;
  TokenBucket b(0, 1, &clock);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(b.Reserve(), Clock::Duration::zero());
}

}  // namespace
}  // namespace tj::kube
