#include "common/event_log.h"

#include <cctype>
#include <ctime>

#include "common/utf8.h"

namespace tj {

EventLog::EventLog(LogFormat format, FILE* out, FILE* err, LogStyle style, WallClock wall_clock)
    : format_(format),
      out_(out),
      err_(err),
      style_(style),
      wall_clock_(wall_clock ? std::move(wall_clock)
                             : [] { return std::chrono::system_clock::now(); }) {}

std::string EventLog::Format(const nlohmann::ordered_json& event, LogFormat format) {
  if (format == LogFormat::kJson) return DumpSafe(event);
  // Text: "epoch_end epoch=1 loss=0.41 ..." in the event's own field order.
  std::string line = event.value("event", std::string("event"));
  for (auto it = event.begin(); it != event.end(); ++it) {
    if (it.key() == "event") continue;
    line += " " + it.key() + "=" + (it->is_string() ? it->get<std::string>() : DumpSafe(*it));
  }
  return line;
}

std::string EventLog::FormatTime(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(ms.count() / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];  // room for any int the compiler can imagine
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count() % 1000));
  return buf;
}

std::string EventLog::Structured(const char* level, const nlohmann::ordered_json& fields) const {
  const std::string ts = FormatTime(wall_clock_());
  if (format_ == LogFormat::kJson) {
    nlohmann::ordered_json line = {{"ts", ts}, {"level", level}};
    for (auto it = fields.begin(); it != fields.end(); ++it) line[it.key()] = *it;
    return DumpSafe(line);
  }
  std::string upper = level;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (fields.contains("msg")) return ts + " " + upper + " " + fields["msg"].get<std::string>();
  return ts + " " + upper + " " + Format(fields, LogFormat::kText);
}

bool ParseLogLevel(const std::string& text, LogLevel* level, std::string* error) {
  if (text.empty() || text == "info") {
    *level = LogLevel::kInfo;
  } else if (text == "debug") {
    *level = LogLevel::kDebug;
  } else if (text == "warn" || text == "warning") {
    *level = LogLevel::kWarn;
  } else if (text == "error") {
    *level = LogLevel::kError;
  } else {
    *error = "log level \"" + text + "\" is unknown; use debug, info, warn or error";
    return false;
  }
  return true;
}

void EventLog::Print(FILE* stream, const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  std::fprintf(stream, "%s\n", line.c_str());
  std::fflush(stream);
}

void EventLog::Emit(const nlohmann::ordered_json& event) {
  if (level_ > LogLevel::kInfo) return;
  Print(out_, style_ == LogStyle::kStructured ? Structured("info", event) : Format(event, format_));
}

void EventLog::Warn(const std::string& message) {
  if (level_ > LogLevel::kWarn) return;
  Print(err_, style_ == LogStyle::kStructured ? Structured("warn", {{"msg", message}})
                                              : "warning: " + message);
}

void EventLog::Error(const std::string& message) {
  Print(err_, style_ == LogStyle::kStructured ? Structured("error", {{"msg", message}})
                                              : "error: " + message);
}

}  // namespace tj
