#include "kube/watch_decoder.h"

#include "common/utf8.h"

namespace tj::kube {

const char* ToString(WatchEvent::Type type) {
  switch (type) {
    case WatchEvent::Type::kAdded:
      return "ADDED";
    case WatchEvent::Type::kModified:
      return "MODIFIED";
    case WatchEvent::Type::kDeleted:
      return "DELETED";
    case WatchEvent::Type::kBookmark:
      return "BOOKMARK";
    case WatchEvent::Type::kError:
      return "ERROR";
  }
  return "?";
}

ApiError WatchEvent::AsError() const {
  ApiError e;
  e.request = "watch";
  if (object.is_object()) {
    e.code = object.value("code", 0);
    e.reason = object.value("reason", "");
    e.message = object.value("message", "");
  }
  if (e.code == 0) e.code = 500;  // an ERROR event without a code is still a server error
  return e;
}

std::string WatchEvent::ResourceVersion() const {
  if (!object.is_object() || !object.contains("metadata")) return "";
  return object["metadata"].value("resourceVersion", "");
}

Result<WatchEvent> ParseWatchEvent(std::string_view line) {
  // {"type": ..., "object": {"metadata": {"managedFields": [...]}}}: the keys of "object" are
  // at depth 2, those of its metadata at depth 3.
  bool in_metadata = false;
  auto skip_managed_fields = [&in_metadata](int depth, nlohmann::json::parse_event_t event,
                                            nlohmann::json& parsed) {
    if (event != nlohmann::json::parse_event_t::key) return true;
    if (depth == 2) in_metadata = parsed == "metadata";
    return !(depth == 3 && in_metadata && parsed == "managedFields");
  };
  auto j = nlohmann::json::parse(line, skip_managed_fields, /*allow_exceptions=*/false);
  ApiError bad{0, "", "", "watch", 0};
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string() || !j.contains("object")) {
    std::string shown = Utf8Prefix(line, 200);
    bad.message = "not a watch event: " + shown;
    return bad;
  }
  WatchEvent ev;
  const std::string type = j["type"].get<std::string>();
  if (type == "ADDED") {
    ev.type = WatchEvent::Type::kAdded;
  } else if (type == "MODIFIED") {
    ev.type = WatchEvent::Type::kModified;
  } else if (type == "DELETED") {
    ev.type = WatchEvent::Type::kDeleted;
  } else if (type == "BOOKMARK") {
    ev.type = WatchEvent::Type::kBookmark;
  } else if (type == "ERROR") {
    ev.type = WatchEvent::Type::kError;
  } else {
    bad.message = "unknown watch event type \"" + type + "\"";
    return bad;
  }
  ev.object = std::move(j["object"]);
  return ev;
}

bool WatchDecoder::Feed(std::string_view bytes, const std::function<bool(WatchEvent&)>& on_event,
                        const std::function<void(const ApiError&)>& on_bad_line) {
  partial_.append(bytes);
  size_t start = 0;
  bool go_on = true;
  while (go_on) {
    size_t nl = partial_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(partial_.data() + start, nl - start);
    start = nl + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) continue;
    auto ev = ParseWatchEvent(line);
    if (ev.ok()) {
      go_on = on_event(*ev);
    } else {
      on_bad_line(ev.error());
    }
  }
  partial_.erase(0, start);
  return go_on;
}

}  // namespace tj::kube
