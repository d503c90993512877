#include "kube/api_error.h"

#include <nlohmann/json.hpp>

#include "common/utf8.h"

namespace tj::kube {

std::string ApiError::ToString() const {
  std::string s = request.empty() ? std::string() : request + ": ";
  if (code == 0) return s + "no answer from the API server: " + message;
  s += std::to_string(code);
  if (!reason.empty()) s += " " + reason;
  if (!message.empty()) s += ": " + message;
  return s;
}

ApiError ApiErrorFromResponse(int http_status, const std::string& body, std::string request) {
  ApiError e;
  e.code = http_status;
  e.request = std::move(request);
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.value("kind", "") == "Status") {
    e.reason = j.value("reason", "");
    e.message = j.value("message", "");
    if (j.contains("code") && j["code"].is_number_integer()) e.code = j["code"].get<int>();
  } else {
    e.message = body.size() > 512 ? Utf8Prefix(body, 512) + "..." : body;
  }
  return e;
}

}  // namespace tj::kube
