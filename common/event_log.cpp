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

void EventLog::Emit(const nlohmann::ordered_json& event) {
  std::string line = Format(event, format_);
  std::lock_guard<std::mutex> lock(mu_);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void EventLog::Warn(const std::string& message) {
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
