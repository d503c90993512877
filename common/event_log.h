// The one logger of the project's processes. Events (machine-readable progress) go to
// stdout, one JSON object per line, or as "key=value" text with --log-format text;
// warnings and errors go to stderr as plain lines. Thread-safe; every line is flushed.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace tj {

enum class LogFormat { kJson, kText };

class EventLog {
 public:
  explicit EventLog(LogFormat format = LogFormat::kJson, FILE* out = stdout, FILE* err = stderr)
      : format_(format), out_(out), err_(err) {}

  // `event` must hold a string field "event", given first; fields print in the order given.
  void Emit(const nlohmann::ordered_json& event);
  void Warn(const std::string& message);
  void Error(const std::string& message);

  // Formats one event as it would be printed (without the newline).
  static std::string Format(const nlohmann::ordered_json& event, LogFormat format);

 private:
  LogFormat format_;
  FILE* out_;
  FILE* err_;
  std::mutex mu_;
};

}  // namespace tj
