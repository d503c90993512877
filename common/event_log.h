// The one logger of the project's processes. Events (machine-readable progress) go to
// stdout, one JSON object per line, or as "key=value" text with --log-format text;
// warnings and errors go to stderr as plain lines. Thread-safe; every line is flushed.
#pragma once

#include <atomic>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace tj {

enum class LogFormat { kJson, kText };

// What a log prints, from everything (kDebug, kInfo: events and warnings and errors) to errors
// only. Events are info, Warn() warn, Error() error.
enum class LogLevel { kDebug, kInfo, kWarn, kError };

// "debug", "info", "warn" (or "warning"), "error"; an error naming the accepted values
// otherwise. An empty text is info.
bool ParseLogLevel(const std::string& text, LogLevel* level, std::string* error);

class EventLog {
 public:
  explicit EventLog(LogFormat format = LogFormat::kJson, FILE* out = stdout, FILE* err = stderr)
      : format_(format), out_(out), err_(err) {}

  // `event` must hold a string field "event", given first; fields print in the order given.
  void Emit(const nlohmann::ordered_json& event);
  void Warn(const std::string& message);
  void Error(const std::string& message);

  // Lines below `level` are not printed (default: kInfo, everything but debug).
  void SetLevel(LogLevel level) { level_ = level; }

  // Formats one event as it would be printed (without the newline).
  static std::string Format(const nlohmann::ordered_json& event, LogFormat format);

 private:
  LogFormat format_;
  std::atomic<LogLevel> level_{LogLevel::kInfo};
  FILE* out_;
  FILE* err_;
  std::mutex mu_;
};

}  // namespace tj
