// common/failpoint.h: the TJ_FAILPOINTS grammar, the @<n> counting and the actions. The
// actions run in death-test children (each re-runs the test with its own environment).
#include "common/failpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

namespace tj::failpoint {
namespace {

using internal::Parse;

TEST(FailpointParse, UnsetOrEmptyMeansNoPoints) {
  EXPECT_TRUE(Parse(nullptr).empty());
  EXPECT_TRUE(Parse("").empty());
  EXPECT_TRUE(Parse(";;").empty());
}

TEST(FailpointParse, ReadsEveryEntry) {
  auto points = Parse("backup.before_rename=sleep:3000@2;other=exit:75;train.step=fill:512@30%1");
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[0]->name, "backup.before_rename");
  EXPECT_EQ(points[0]->action, internal::Point::Action::kSleep);
  EXPECT_EQ(points[0]->arg, 3000);
  EXPECT_EQ(points[0]->nth, 2);
  EXPECT_EQ(points[1]->name, "other");
  EXPECT_EQ(points[1]->action, internal::Point::Action::kExit);
  EXPECT_EQ(points[1]->arg, 75);
  EXPECT_EQ(points[1]->nth, 0);
  EXPECT_EQ(points[1]->gang, -1);
  EXPECT_EQ(points[2]->action, internal::Point::Action::kFill);
  EXPECT_EQ(points[2]->arg, 512);
  EXPECT_EQ(points[2]->nth, 30);
  EXPECT_EQ(points[2]->gang, 1);
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
      {"p=fill:1%", "%<gang> must be a non-negative integer"},
      {"p=fill:1@2%x", "%<gang> must be a non-negative integer"},
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

// fill:<MiB> in the process of the gang named, and only there: the memory is written (it
// counts in the process's resident size, as it does against a container's memory limit).
TEST(FailpointHitDeathTest, FillWritesTheMemoryOnlyInTheGangNamed) {
  setenv("TJ_FAILPOINTS", "p=fill:64%3", 1);
  auto resident_mib = [] {  // the second field of /proc/self/statm, in pages
    long pages = 0, resident = 0;
    std::ifstream("/proc/self/statm") >> pages >> resident;
    return resident * ::sysconf(_SC_PAGESIZE) / (1 << 20);
  };
  setenv("TJ_RESTART_COUNT", "3", 1);
  EXPECT_EXIT(
      {
        const long before = resident_mib();
        Hit("p");
        std::exit(resident_mib() >= before + 60 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "failpoint p: fill 64 MiB \\(hit 1\\)");
  setenv("TJ_RESTART_COUNT", "2", 1);
  EXPECT_EXIT(
      {
        const long before = resident_mib();
        Hit("p");
        std::exit(resident_mib() < before + 60 ? 3 : 1);
      },
      ::testing::ExitedWithCode(3), "");
  unsetenv("TJ_RESTART_COUNT");
}

}  // namespace
}  // namespace tj::failpoint
