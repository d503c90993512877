#include "kube/request_metrics.h"

#include <chrono>

namespace tj::kube {

std::string RequestMetrics::HostOf(const std::string& server) {
  std::string host = server;
  if (auto scheme = host.find("://"); scheme != std::string::npos) host = host.substr(scheme + 3);
  if (auto slash = host.find('/'); slash != std::string::npos) host.resize(slash);
  return host;
}

void RequestMetrics::Observe(const std::string& method, int code, double seconds) {
  const std::string code_label = code > 0 ? std::to_string(code) : "<error>";
  MutexLock lock(mu_);
  ++requests_[{code_label, method}];
  auto& h = durations_[method];
  if (!h) h = std::make_unique<Histogram>(Histogram::RequestBuckets());
  h->Observe(seconds);
}

void RequestMetrics::Render(PrometheusText* out) const {
  MutexLock lock(mu_);
  out->Declare("rest_client_requests_total",
               "Number of HTTP requests, partitioned by status code, method, and host.", "counter");
  for (const auto& [key, n] : requests_) {
    const auto& [code, method] = key;
    out->Counter("rest_client_requests_total", "", static_cast<double>(n),
                 {{"code", code}, {"method", method}, {"host", host_}});
  }
  out->Declare("rest_client_request_duration_seconds",
               "Request latency in seconds. Broken down by verb, and host.", "histogram");
  for (const auto& [verb, h] : durations_) {
    out->Histogram("rest_client_request_duration_seconds", "", h->Snapshot(),
                   {{"verb", verb}, {"host", host_}});
  }
}

namespace {
double SecondsSince(Clock* clock, Clock::TimePoint t0) {
  return std::chrono::duration<double>(clock->Now() - t0).count();
}
}  // namespace

Result<HttpResponse> MeteredTransport::Send(const HttpRequest& request) {
  const auto t0 = clock_->Now();
  auto r = inner_->Send(request);
  metrics_->Observe(request.method, r.ok() ? r->status : 0, SecondsSince(clock_, t0));
  return r;
}

Result<HttpResponse> MeteredTransport::Stream(const HttpRequest& request,
                                              const std::function<bool(std::string_view)>& on_data,
                                              std::stop_token stop) {
  // A watch lasts minutes: its latency is the time to its answer's first bytes (a 200 starts
  // streaming), not the time it stays open.
  const auto t0 = clock_->Now();
  bool observed = false;
  auto r = inner_->Stream(
      request,
      [&](std::string_view data) {
        if (!observed) {
          observed = true;
          metrics_->Observe(request.method, 200, SecondsSince(clock_, t0));
        }
        return on_data(data);
      },
      stop);
  if (!observed)
    metrics_->Observe(request.method, r.ok() ? r->status : 0, SecondsSince(clock_, t0));
  return r;
}

}  // namespace tj::kube
