#include "kube/rest_client.h"

#include <fstream>
#include <sstream>

#include "common/backoff.h"
#include "common/utf8.h"
#include "kube/curl_transport.h"

namespace tj::kube {
namespace {

constexpr auto kTokenRereadPeriod = std::chrono::minutes(1);

void AddParam(std::string* q, const std::string& key, const std::string& value) {
  if (value.empty()) return;
  *q += (q->find('?') == std::string::npos ? "?" : "&") + key + "=" + UrlEncode(value);
}

const char* ContentType(PatchType t) {
  switch (t) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
    case PatchType::kApply:
      return "application/apply-patch+yaml";
  }
  return "application/json";
}

std::string NameOf(const json& object) {
  if (!object.is_object() || !object.contains("metadata")) return "";
  return object["metadata"].value("name", "");
}

}  // namespace

RestClient::RestClient(RestConfig config, std::unique_ptr<HttpTransport> transport, Clock* clock)
    : config_(std::move(config)),
      transport_(std::move(transport)),
      clock_(clock),
      limiter_(config_.qps, config_.burst, clock) {}

StatusOr<std::unique_ptr<RestClient>> RestClient::New(const RestConfig& config, Clock* clock) {
  auto transport = NewCurlTransport(config);
  if (!transport.ok()) return transport.status().WithContext("API server " + config.server);
  return std::make_unique<RestClient>(config, std::move(transport).value(), clock);
}

std::string RestClient::Authorization() {
  MutexLock lock(token_mu_);
  if (config_.token_file.empty()) {
    return config_.bearer_token.empty() ? "" : "Bearer " + config_.bearer_token;
  }
  auto now = clock_->Now();
  if (!token_loaded_ || now - token_read_at_ >= kTokenRereadPeriod) {
    std::ifstream in(config_.token_file);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string t = ss.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    if (in && !t.empty()) {
      token_ = t;
    } else if (token_.empty()) {
      token_ = config_.bearer_token;  // the file is unreadable: fall back to a static token
    }
    token_loaded_ = true;
    token_read_at_ = now;
  }
  return token_.empty() ? "" : "Bearer " + token_;
}

Result<json> RestClient::Call(const std::string& method, const std::string& path_and_query,
                              const std::string& content_type, const std::string& body,
                              const json::parser_callback_t& on_parse) {
  const std::string what = method + " " + path_and_query;
  ExponentialBackoff backoff(std::chrono::milliseconds(100), std::chrono::seconds(10), 2.0, 0.1,
                             std::hash<std::string>{}(what));
  bool reauthenticated = false;
  for (int attempt = 0;; ++attempt) {
    limiter_.Wait();
    HttpRequest req{method, path_and_query, content_type, body, Authorization(), config_.timeout};
    auto resp = transport_->Send(req);
    bool can_retry = attempt < config_.max_retries;
    if (!resp.ok()) {
      ApiError e = resp.error();
      e.request = what;
      if (can_retry && method == "GET") {
        clock_->SleepFor(backoff.Next());
        continue;
      }
      return e;
    }
    const int status = resp->status;
    if (status >= 200 && status < 300) {
      if (resp->body.empty()) return json::object();
      auto j = json::parse(resp->body, on_parse, /*allow_exceptions=*/false);
      if (j.is_discarded()) {
        return ApiError{status, "", "the answer is not JSON: " + Utf8Prefix(resp->body, 200), what,
                        0};
      }
      return j;
    }
    ApiError e = ApiErrorFromResponse(status, resp->body, what);
    if (auto it = resp->headers.find("retry-after"); it != resp->headers.end()) {
      e.retry_after_s = std::atoi(it->second.c_str());
    }
    if (status == 401 && !config_.token_file.empty() && !reauthenticated) {
      // The token may have rotated since we read it: read it again once.
      MutexLock lock(token_mu_);
      token_loaded_ = false;
      reauthenticated = true;
      continue;
    }
    bool retryable = status == 429 || (status >= 500 && (e.retry_after_s > 0 || method == "GET"));
    if (retryable && can_retry) {
      auto delay = e.retry_after_s > 0 ? std::chrono::seconds(std::min(e.retry_after_s, 60))
                                       : backoff.Next();
      clock_->SleepFor(delay);
      continue;
    }
    return e;
  }
}

Result<json> RestClient::Get(const Resource& r, const std::string& ns, const std::string& name) {
  return Call("GET", r.Path(ns, name), "", "");
}

Result<json> RestClient::List(const Resource& r, const std::string& ns,
                              const ListOptions& options) {
  json merged = {{"items", json::array()}, {"metadata", json::object()}};
  std::string cont;
  bool first = true;
  do {
    std::string q = r.Path(ns);
    AddParam(&q, "labelSelector", options.label_selector);
    AddParam(&q, "fieldSelector", options.field_selector);
    if (options.page_size > 0) AddParam(&q, "limit", std::to_string(options.page_size));
    AddParam(&q, "continue", cont);
    if (first) AddParam(&q, "resourceVersion", options.resource_version);
    // {"kind", "metadata": {...}, "items": [{...}, ...]}: the top object's keys are at depth 1,
    // an item ends at depth 2.
    bool in_items = false;
    json::parser_callback_t each_item;
    if (options.each_item) {
      each_item = [&](int depth, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::key && depth == 1) in_items = parsed == "items";
        if (event != json::parse_event_t::object_end || depth != 2 || !in_items) return true;
        return options.each_item(parsed);
      };
    }
    auto page = Call("GET", q, "", "", each_item);
    if (!page.ok()) return page;
    json& p = *page;
    if (first) {
      merged["metadata"]["resourceVersion"] = p["metadata"].value("resourceVersion", "");
      if (p.contains("kind")) merged["kind"] = p["kind"];
      if (p.contains("apiVersion")) merged["apiVersion"] = p["apiVersion"];
    }
    if (p.contains("items") && p["items"].is_array()) {
      for (auto& item : p["items"]) merged["items"].push_back(std::move(item));
    }
    cont = p.contains("metadata") ? p["metadata"].value("continue", "") : "";
    first = false;
  } while (!cont.empty());
  return merged;
}

Result<json> RestClient::Create(const Resource& r, const std::string& ns, const json& object) {
  return Call("POST", r.Path(ns), "application/json", DumpSafe(object));
}

Result<json> RestClient::Update(const Resource& r, const std::string& ns, const json& object) {
  std::string name = NameOf(object);
  if (name.empty()) {
    return ApiError{0, "", "the object has no metadata.name", "PUT " + r.Path(ns), 0};
  }
  return Call("PUT", r.Path(ns, name), "application/json", DumpSafe(object));
}

Result<json> RestClient::UpdateStatus(const Resource& r, const std::string& ns,
                                      const json& object) {
  std::string name = NameOf(object);
  if (name.empty()) {
    return ApiError{0, "", "the object has no metadata.name", "PUT " + r.Path(ns), 0};
  }
  return Call("PUT", r.Path(ns, name, "status"), "application/json", DumpSafe(object));
}

Result<json> RestClient::Patch(const Resource& r, const std::string& ns, const std::string& name,
                               PatchType type, const json& patch, const PatchOptions& options) {
  std::string q = r.Path(ns, name, options.subresource);
  AddParam(&q, "fieldManager", options.field_manager);
  if (type == PatchType::kApply) {
    if (options.field_manager.empty()) {
      return ApiError{0, "", "server-side apply needs PatchOptions.field_manager", "PATCH " + q, 0};
    }
    if (options.force) AddParam(&q, "force", "true");
  }
  return Call("PATCH", q, ContentType(type), DumpSafe(patch));
}

Result<json> RestClient::Delete(const Resource& r, const std::string& ns, const std::string& name,
                                const DeleteOptions& options) {
  json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (!options.propagation_policy.empty()) body["propagationPolicy"] = options.propagation_policy;
  if (options.precondition_uid) body["preconditions"]["uid"] = *options.precondition_uid;
  if (options.precondition_resource_version) {
    body["preconditions"]["resourceVersion"] = *options.precondition_resource_version;
  }
  if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
  return Call("DELETE", r.Path(ns, name), "application/json", DumpSafe(body));
}

Result<json> RestClient::Raw(const std::string& method, const std::string& path_and_query,
                             const std::optional<json>& body) {
  return Call(method, path_and_query, body ? "application/json" : "", body ? DumpSafe(*body) : "");
}

Result<WatchSummary> RestClient::Watch(const Resource& r, const std::string& ns,
                                       const WatchOptions& options,
                                       const std::function<bool(WatchEvent&)>& on_event,
                                       std::stop_token stop) {
  std::string q = r.Path(ns) + "?watch=1";
  AddParam(&q, "resourceVersion", options.resource_version);
  AddParam(&q, "labelSelector", options.label_selector);
  AddParam(&q, "fieldSelector", options.field_selector);
  if (options.allow_bookmarks) AddParam(&q, "allowWatchBookmarks", "true");
  if (options.timeout_seconds > 0) {
    AddParam(&q, "timeoutSeconds", std::to_string(options.timeout_seconds));
  }
  const std::string what = "GET " + q;
  limiter_.Wait();
  HttpRequest req{
      "GET",
      q,
      "",
      "",
      Authorization(),
      std::chrono::seconds(options.timeout_seconds > 0 ? options.timeout_seconds + 30 : 3600)};
  WatchDecoder decoder;
  WatchSummary summary;
  ApiError bad_line;
  bool saw_bad_line = false;
  auto on_data = [&](std::string_view bytes) {
    return decoder.Feed(
        bytes,
        [&](WatchEvent& ev) {
          ++summary.events;
          std::string rv = ev.ResourceVersion();
          if (!rv.empty() && ev.type != WatchEvent::Type::kError) {
            summary.last_resource_version = rv;
          }
          return on_event(ev);
        },
        [&](const ApiError& e) {
          bad_line = e;
          saw_bad_line = true;
        });
  };
  auto resp = transport_->Stream(req, on_data, stop);
  if (!resp.ok()) {
    ApiError e = resp.error();
    e.request = what;
    return e;
  }
  if (resp->status != 200) return ApiErrorFromResponse(resp->status, resp->body, what);
  if (saw_bad_line) {
    bad_line.request = what;
    return bad_line;
  }
  return summary;
}

}  // namespace tj::kube
