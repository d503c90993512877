#include "operator/kube/time_format.h"

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

}  // namespace
}  // namespace tj::kube
