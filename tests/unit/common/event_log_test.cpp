// The logger's levels: what each prints (the chart's logLevel sets the operator's).
#include "common/event_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace tj {
namespace {

// What `write` printed through a log made by `make` to each stream (stdout, stderr).
std::pair<std::string, std::string> Capture(
    const std::function<std::unique_ptr<EventLog>(FILE*, FILE*)>& make,
    const std::function<void(EventLog&)>& write) {
  char* out_buf = nullptr;
  char* err_buf = nullptr;
  size_t out_size = 0, err_size = 0;
  FILE* out = open_memstream(&out_buf, &out_size);
  FILE* err = open_memstream(&err_buf, &err_size);
  write(*make(out, err));
  std::fclose(out);
  std::fclose(err);
  std::pair<std::string, std::string> got{out_buf, err_buf};
  std::free(out_buf);
  std::free(err_buf);
  return got;
}

// What a log at `level` printed after one event, one warning and one error.
std::pair<std::string, std::string> Printed(LogLevel level) {
  return Capture(
      [](FILE* out, FILE* err) { return std::make_unique<EventLog>(LogFormat::kJson, out, err); },
      [level](EventLog& log) {
        log.SetLevel(level);
        log.Emit({{"event", "started"}});
        log.Warn("slow");
        log.Error("broken");
      });
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

// The operator's style: every line, warnings and errors included, one JSON object with its
// time and level first; or, as text, "TIME LEVEL ...". Messages are escaped, whatever they hold.
std::pair<std::string, std::string> PrintedStructured(LogFormat format) {
  // 2026-01-02T03:04:05.678Z
  const auto t = std::chrono::system_clock::time_point(std::chrono::milliseconds(1767323045678));
  return Capture(
      [&](FILE* out, FILE* err) {
        return std::make_unique<EventLog>(format, out, err, LogStyle::kStructured,
                                          [t] { return t; });
      },
      [](EventLog& log) {
        log.Emit({{"event", "leading"}, {"identity", "a_1"}, {"workers", 4}});
        log.Warn("reconciling ns/x: 409 \"Conflict\"\nretrying");
        log.Error("lost the lease");
      });
}

TEST(EventLog, StructuredLinesCarryTimeAndLevel) {
  const auto [out, err] = PrintedStructured(LogFormat::kJson);
  EXPECT_EQ(out,
            "{\"ts\":\"2026-01-02T03:04:05.678Z\",\"level\":\"info\",\"event\":\"leading\","
            "\"identity\":\"a_1\",\"workers\":4}\n");
  // Each stderr line parses as JSON, the quote and newline of the message escaped.
  std::istringstream lines(err);
  std::vector<nlohmann::json> parsed;
  for (std::string line; std::getline(lines, line);) parsed.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(parsed.size(), 2u) << err;
  EXPECT_EQ(parsed[0]["level"], "warn");
  EXPECT_EQ(parsed[0]["msg"], "reconciling ns/x: 409 \"Conflict\"\nretrying");
  EXPECT_EQ(parsed[0]["ts"], "2026-01-02T03:04:05.678Z");
  EXPECT_EQ(parsed[1]["level"], "error");
  EXPECT_EQ(parsed[1]["msg"], "lost the lease");

  const auto [text_out, text_err] = PrintedStructured(LogFormat::kText);
  EXPECT_EQ(text_out, "2026-01-02T03:04:05.678Z INFO leading identity=a_1 workers=4\n");
  EXPECT_EQ(text_err.rfind("2026-01-02T03:04:05.678Z WARN reconciling ns/x", 0), 0u) << text_err;
  EXPECT_NE(text_err.find("2026-01-02T03:04:05.678Z ERROR lost the lease\n"), std::string::npos);
}

}  // namespace
}  // namespace tj
