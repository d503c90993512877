#include "kube/time_format.h"

#include <gtest/gtest.h>

namespace tj::kube {
namespace {

TEST(TimeFormat, RoundTripsSecondsAndMicroseconds) {
  WallTime t =
      std::chrono::system_clock::from_time_t(1700000000) + std::chrono::microseconds(123456);
  EXPECT_EQ(FormatTime(t), "2023-11-14T22:13:20Z");
  EXPECT_EQ(FormatMicroTime(t), "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(ParseTime("2023-11-14T22:13:20.123456Z"), t);
  EXPECT_EQ(ParseTime("2023-11-14T22:13:20Z"), std::chrono::system_clock::from_time_t(1700000000));
  EXPECT_FALSE(ParseTime("yesterday").has_value());
  EXPECT_FALSE(ParseTime("2023-11-14T22:13:20+01:00").has_value());
}

// A time is read from objects others write (a status, an annotation): none may wrap the
// clock, alone or with a century added to it.
TEST(TimeFormat, TimesTheClockCannotHoldAreRefused) {
  for (const char* t : {"9999-12-31T23:59:59Z", "2262-04-12T00:00:00Z", "2162-01-01T00:00:00Z",
                        "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z"}) {
    EXPECT_FALSE(ParseTime(t)) << t;
  }
  auto latest = ParseTime("2161-12-31T23:59:59.999999Z");
  ASSERT_TRUE(latest);
  const auto century = std::chrono::seconds(int64_t{100} * 365 * 24 * 3600);
  EXPECT_GT((*latest + century).time_since_epoch(), latest->time_since_epoch());
  EXPECT_EQ(FormatTime(*latest + century).substr(0, 4), "2261");
  ASSERT_TRUE(ParseTime("1970-01-01T00:00:00Z"));
  EXPECT_EQ(ParseTime("1970-01-01T00:00:00Z")->time_since_epoch().count(), 0);
}

}  // namespace
}  // namespace tj::kube
