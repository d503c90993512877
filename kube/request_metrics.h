// client-go's API-server client metrics, under client-go's names so that dashboards and alerts
// built for Go operators work unchanged:
//   rest_client_requests_total{code,method,host}           counter ("<error>": no answer)
//   rest_client_request_duration_seconds{verb,host}         histogram
// RequestMetrics counts; MeteredTransport is an HttpTransport that feeds it from every request
// that goes through it (watches are counted when their answer's status arrives). Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "common/clock.h"
#include "common/histogram.h"
#include "common/prometheus_text.h"
#include "common/thread_annotations.h"
#include "kube/http_transport.h"

namespace tj::kube {

class RequestMetrics {
 public:
  // `host` labels every sample: the API server's host:port.
  explicit RequestMetrics(std::string host) : host_(std::move(host)) {}
  RequestMetrics(const RequestMetrics&) = delete;
  RequestMetrics& operator=(const RequestMetrics&) = delete;

  // `code` is the HTTP status, or 0 when no answer came (labelled "<error>", as client-go does).
  void Observe(const std::string& method, int code, double seconds);
  void Render(PrometheusText* out) const;

  // "https://10.0.0.1:6443/" -> "10.0.0.1:6443".
  static std::string HostOf(const std::string& server);

 private:
  const std::string host_;
  mutable Mutex mu_;
  std::map<std::tuple<std::string, std::string>, uint64_t> requests_
      TJ_GUARDED_BY(mu_);  // (code, method)
  std::map<std::string, std::unique_ptr<Histogram>> durations_ TJ_GUARDED_BY(mu_);  // verb
};

class MeteredTransport final : public HttpTransport {
 public:
  // `inner`'s requests are measured on `clock` into `metrics`, which must outlive this.
  MeteredTransport(std::unique_ptr<HttpTransport> inner, RequestMetrics* metrics, Clock* clock)
      : inner_(std::move(inner)), metrics_(metrics), clock_(clock) {}

  Result<HttpResponse> Send(const HttpRequest& request) override;
  Result<HttpResponse> Stream(const HttpRequest& request,
                              const std::function<bool(std::string_view)>& on_data,
                              std::stop_token stop) override;

 private:
  std::unique_ptr<HttpTransport> inner_;
  RequestMetrics* metrics_;
  Clock* clock_;
};

}  // namespace tj::kube
