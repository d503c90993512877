#include "common/backoff.h"

#include <gtest/gtest.h>

namespace tj {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ExponentialDelay, DoublesAndCaps) {
  EXPECT_EQ(ExponentialDelay(milliseconds(5), seconds(1000), 2.0, 0), milliseconds(5));
  EXPECT_EQ(ExponentialDelay(milliseconds(5), seconds(1000), 2.0, 3), milliseconds(40));
  EXPECT_EQ(ExponentialDelay(milliseconds(5), seconds(1000), 2.0, 20), seconds(1000));
  // No overflow for absurd exponents.
  EXPECT_EQ(ExponentialDelay(milliseconds(5), seconds(1000), 2.0, 100000), seconds(1000));
}

TEST(ExponentialBackoff, JitterStaysWithinBoundsAndResetRestarts) {
  ExponentialBackoff b(milliseconds(800), seconds(30), 2.0, 0.5, 42);
  auto first = b.Next();
  EXPECT_GE(first, milliseconds(800));
  EXPECT_LT(first, milliseconds(1200));
  for (int i = 0; i < 20; ++i) {
    auto d = b.Next();
    EXPECT_LT(d, seconds(45));
  }
  EXPECT_GE(b.Next(), seconds(30));
  b.Reset();
  EXPECT_EQ(b.attempts(), 0);
  EXPECT_LT(b.Next(), milliseconds(1200));
}

}  // namespace
}  // namespace tj
