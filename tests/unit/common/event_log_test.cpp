// The logger's levels: what each prints (the chart's logLevel sets the operator's).
#include "common/event_log.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace tj {
namespace {

// What `log` printed to each stream after one event, one warning and one error.
std::pair<std::string, std::string> Printed(LogLevel level) {
  char* out_buf = nullptr;
  char* err_buf = nullptr;
  size_t out_size = 0, err_size = 0;
  FILE* out = open_memstream(&out_buf, &out_size);
  FILE* err = open_memstream(&err_buf, &err_size);
  {
    EventLog log(LogFormat::kJson, out, err);
    log.SetLevel(level);
    log.Emit({{"event", "started"}});
    log.Warn("slow");
    log.Error("broken");
  }
  std::fclose(out);
  std::fclose(err);
  std::pair<std::string, std::string> got{out_buf, err_buf};
  std::free(out_buf);
  std::free(err_buf);
  return got;
}

TEST(EventLog, EachLevelPrintsItsLinesAndAboveOnly) {
  EXPECT_EQ(Printed(LogLevel::kDebug),
            std::make_pair(std::string("{\"event\":\"started\"}\n"),
                           std::string("warning: slow\nerror: broken\n")));
  EXPECT_EQ(Printed(LogLevel::kInfo), Printed(LogLevel::kDebug));
  EXPECT_EQ(Printed(LogLevel::kWarn),
            std::make_pair(std::string(), std::string("warning: slow\nerror: broken\n")));
  EXPECT_EQ(Printed(LogLevel::kError),
            std::make_pair(std::string(), std::string("error: broken\n")));
}

TEST(EventLog, ParseLogLevelTakesTheChartsValuesAndNamesABadOne) {
  LogLevel level = LogLevel::kDebug;
  std::string error;
  for (const auto& [text, want] : {std::pair{"", LogLevel::kInfo},
                                   {"info", LogLevel::kInfo},
                                   {"debug", LogLevel::kDebug},
                                   {"warn", LogLevel::kWarn},
                                   {"warning", LogLevel::kWarn},
                                   {"error", LogLevel::kError}}) {
    ASSERT_TRUE(ParseLogLevel(text, &level, &error)) << text;
    EXPECT_EQ(level, want) << text;
  }
  EXPECT_FALSE(ParseLogLevel("verbose", &level, &error));
  EXPECT_EQ(error, "log level \"verbose\" is unknown; use debug, info, warn or error");
}

}  // namespace
}  // namespace tj
