#include "common/event_log.h"

namespace tj {

std::string EventLog::Format(const nlohmann::ordered_json& event, LogFormat format) {
  if (format == LogFormat::kJson) return event.dump();
  // Text: "epoch_end epoch=1 loss=0.41 ..." in the event's own field order.
  std::string line = event.value("event", std::string("event"));
  for (auto it = event.begin(); it != event.end(); ++it) {
    if (it.key() == "event") continue;
    line += " " + it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump());
  }
  return line;
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

void EventLog::Emit(const nlohmann::ordered_json& event) {
  if (level_ > LogLevel::kInfo) return;
  std::string line = Format(event, format_);
  std::lock_guard<std::mutex> lock(mu_);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void EventLog::Warn(const std::string& message) {
  if (level_ > LogLevel::kWarn) return;
  std::lock_guard<std::mutex> lock(mu_);
  std::fprintf(err_, "warning: %s\n", message.c_str());
  std::fflush(err_);
}

void EventLog::Error(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  std::fprintf(err_, "error: %s\n", message.c_str());
  std::fflush(err_);
}

}  // namespace tj
