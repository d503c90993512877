// The one logger of the project's processes.
//
// Events (machine-readable progress, e.g. the trainer's epoch_end that tests, benchmarks and
// the operator parse) go to stdout, one JSON object per line, or as "key=value" text with
// LogFormat::kText; warnings and errors go to stderr.
//
// With LogStyle::kStructured (the operator and the node agent) every line, warnings and errors
// included, carries its UTC time and level first, as Kubernetes components' structured logs
// do: {"ts":"2026-01-02T03:04:05.678Z","level":"info","event":"leading",...} and
// {"ts":...,"level":"warn","msg":"..."} in JSON; "2026-01-02T03:04:05.678Z INFO leading k=v"
// and "... WARN message" in text. Without it (the trainer) events print as they were given
// and warnings as "warning: ..." lines, the format its users already parse.
//
// Why no log library: every line is built as a nlohmann::json object (the project's one JSON
// helper), so any text a tenant or the API server puts in a message is escaped correctly;
// spdlog's pattern formatter (the obvious candidate) pastes the message into its pattern
// unescaped, so a quote in an error would break the JSON line. What remains, a timestamp, a
// level filter and a mutex, is a few lines here. Thread-safe; every line is flushed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace tj {

enum class LogFormat { kJson, kText };
enum class LogStyle { kPlain, kStructured };

// What a log prints, from everything (kDebug, kInfo: events and warnings and errors) to errors
// only. Events are info, Warn() warn, Error() error.
enum class LogLevel { kDebug, kInfo, kWarn, kError };

// "debug", "info", "warn" (or "warning"), "error"; an error naming the accepted values
// otherwise. An empty text is info.
bool ParseLogLevel(const std::string& text, LogLevel* level, std::string* error);

class EventLog {
 public:
  using WallClock = std::function<std::chrono::system_clock::time_point()>;

  explicit EventLog(LogFormat format = LogFormat::kJson, FILE* out = stdout, FILE* err = stderr,
                    LogStyle style = LogStyle::kPlain, WallClock wall_clock = nullptr);

  // `event` must hold a string field "event", given first; fields print in the order given.
  void Emit(const nlohmann::ordered_json& event);
  void Warn(const std::string& message);
  void Error(const std::string& message);

  // Lines below `level` are not printed (default: kInfo, everything but debug).
  void SetLevel(LogLevel level) { level_ = level; }

  // Formats one event as it would be printed in kPlain style (without the newline).
  static std::string Format(const nlohmann::ordered_json& event, LogFormat format);
  // "2026-01-02T03:04:05.678Z".
  static std::string FormatTime(std::chrono::system_clock::time_point t);

 private:
  // One line of kStructured style: time, level, then the event's fields.
  std::string Structured(const char* level, const nlohmann::ordered_json& fields) const;
  void Print(FILE* stream, const std::string& line);

  LogFormat format_;
  std::atomic<LogLevel> level_{LogLevel::kInfo};
  FILE* out_;
  FILE* err_;
  LogStyle style_;
  WallClock wall_clock_;
  std::mutex mu_;
};

}  // namespace tj
