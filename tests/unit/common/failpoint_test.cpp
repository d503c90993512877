// common/failpoint.h: the TJ_FAILPOINTS grammar, the @<n> counting and the actions. The
// actions run in death-test children (each re-runs the test with its own environment).
#include "common/failpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>

namespace tj::failpoint {
namespace {

using internal::Parse;

TEST(FailpointParse, UnsetOrEmptyMeansNoPoints) {
  EXPECT_TRUE(Parse(nullptr).empty());
  EXPECT_TRUE(Parse("").empty());
  EXPECT_TRUE(Parse(";;").empty());
}

TEST(FailpointParse, ReadsEveryEntry) {
  auto points = Parse("backup.before_rename=sleep:3000@2;other=exit:75");
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0]->name, "backup.before_rename");
  EXPECT_FALSE(points[0]->exit);
  EXPECT_EQ(points[0]->arg, 3000);
  EXPECT_EQ(points[0]->nth, 2);
  EXPECT_EQ(points[1]->name, "other");
  EXPECT_TRUE(points[1]->exit);
  EXPECT_EQ(points[1]->arg, 75);
  EXPECT_EQ(points[1]->nth, 0);
}

TEST(FailpointParseDeathTest, MalformedEntriesExitTwoNamingTheEntry) {
  const struct {
    const char* spec;
    const char* why;
  } cases[] = {
      {"nameonly", "no <name>="},
      {"=sleep:1", "no <name>="},
      {"p=nap:1", "unknown action"},
      {"p=sleep", "unknown action"},
      {"p=sleep:-1", "non-negative integer"},
      {"p=sleep:1x", "non-negative integer"},
      {"p=exit:256", "exit code is <= 255"},
      {"p=exit:1@0", "@<n> must be a positive integer"},
      {"p=exit:1@", "@<n> must be a positive integer"},
  };
  for (const auto& c : cases) {
    EXPECT_EXIT(Parse(c.spec), ::testing::ExitedWithCode(2),
                std::string("bad entry '") + c.spec + "'.*" + c.why)
        << c.spec;
  }
}

TEST(FailpointHitDeathTest, ExitActsOnlyOnTheNthHit) {
  setenv("TJ_FAILPOINTS", "p=exit:7@2", 1);
  EXPECT_EXIT(
      {
        Hit("p");  // the first hit passes
        Hit("q");  // another point is not counted
        Hit("p");
        std::exit(0);
      },
      ::testing::ExitedWithCode(7), "failpoint p: exit 7 \\(hit 2\\)");
}

TEST(FailpointHitDeathTest, SleepPausesEveryHitWithoutN) {
  setenv("TJ_FAILPOINTS", "p=sleep:150", 1);
  EXPECT_EXIT(
      {
        const auto start = std::chrono::steady_clock::now();
        Hit("p");
        Hit("p");
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
        std::exit(ms >= 300 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "failpoint p: sleep 150 ms \\(hit 2\\)");
}

}  // namespace
}  // namespace tj::failpoint
