// RestClient: kube::Client over HTTP(S). Adds the bearer token (re-read from its file when it
// changes, at most once a minute), a client-side QPS/burst limit, and retries of 429 and 5xx
// answers (and of transport errors for GETs) with exponential backoff that honours
// Retry-After. Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/http_transport.h"
#include "kube/rate_limiter.h"

namespace tj::kube {

class RestClient final : public Client {
 public:
  // `clock` must outlive the client.
  RestClient(RestConfig config, std::unique_ptr<HttpTransport> transport, Clock* clock);
  // With the libcurl transport (curl_transport.h).
  static StatusOr<std::unique_ptr<RestClient>> New(const RestConfig& config, Clock* clock);

  Result<json> Get(const Resource& r, const std::string& ns, const std::string& name) override;
  Result<json> List(const Resource& r, const std::string& ns,
                    const ListOptions& options = {}) override;
  Result<json> Create(const Resource& r, const std::string& ns, const json& object) override;
  Result<json> Update(const Resource& r, const std::string& ns, const json& object) override;
  Result<json> UpdateStatus(const Resource& r, const std::string& ns, const json& object) override;
  Result<json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                     PatchType type, const json& patch, const PatchOptions& options = {}) override;
  Result<json> Delete(const Resource& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options = {}) override;
  Result<WatchSummary> Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                             const std::function<bool(WatchEvent&)>& on_event,
                             std::stop_token stop = {}) override;
  Result<json> Raw(const std::string& method, const std::string& path_and_query,
                   const std::optional<json>& body = std::nullopt) override;

  const RestConfig& config() const { return config_; }

 private:
  // Rate limit, auth, retries; returns the parsed JSON answer of a 2xx, or the ApiError.
  // `on_parse` (may be null) is nlohmann::json's parser callback for the answer.
  Result<json> Call(const std::string& method, const std::string& path_and_query,
                    const std::string& content_type, const std::string& body,
                    const json::parser_callback_t& on_parse = nullptr);
  std::string Authorization();

  RestConfig config_;
  std::unique_ptr<HttpTransport> transport_;
  Clock* clock_;
  TokenBucket limiter_;
  Mutex token_mu_;
  std::string token_ TJ_GUARDED_BY(token_mu_);
  Clock::TimePoint token_read_at_ TJ_GUARDED_BY(token_mu_);
  bool token_loaded_ TJ_GUARDED_BY(token_mu_) = false;
};

}  // namespace tj::kube
