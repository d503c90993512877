// rest_client_* from every request through MeteredTransport: status codes, transport errors,
// latency on the injected clock, and a watch counted once when its answer starts.
#include "kube/request_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace tj::kube {
namespace {

// Answers with a set status after advancing the clock by a set time; 0: a transport error.
class ScriptedTransport final : public HttpTransport {
 public:
  explicit ScriptedTransport(FakeClock* clock) : clock_(clock) {}
  int status = 200;
  std::chrono::milliseconds takes{0};
  Result<HttpResponse> Send(const HttpRequest&) override {
    clock_->Advance(takes);
    if (status == 0) {
      ApiError e;
      e.message = "connection refused";
      return e;
    }
    HttpResponse r;
    r.status = status;
    return r;
  }
  Result<HttpResponse> Stream(const HttpRequest&,
                              const std::function<bool(std::string_view)>& on_data,
                              std::stop_token) override {
    clock_->Advance(takes);
    if (status != 200) {
      HttpResponse r;
      r.status = status;
      return r;
    }
    on_data("{\"type\":\"ADDED\"}\n");
    clock_->Advance(std::chrono::minutes(5));  // the watch stays open: not latency
    on_data("{\"type\":\"MODIFIED\"}\n");
    HttpResponse r;
    r.status = 200;
    return r;
  }

 private:
  FakeClock* clock_;
};

TEST(RequestMetrics, HostOfServer) {
  EXPECT_EQ(RequestMetrics::HostOf("https://10.0.0.1:6443"), "10.0.0.1:6443");
  EXPECT_EQ(RequestMetrics::HostOf("https://[::1]:6443/prefix"), "[::1]:6443");
  EXPECT_EQ(RequestMetrics::HostOf("kube:8080"), "kube:8080");
}

TEST(RequestMetrics, CountsCodesMethodsAndLatencyLikeClientGo) {
  FakeClock clock;
  RequestMetrics metrics("10.0.0.1:6443");
  auto inner = std::make_unique<ScriptedTransport>(&clock);
  ScriptedTransport* script = inner.get();
  MeteredTransport t(std::move(inner), &metrics, &clock);
  HttpRequest get, post;
  get.method = "GET";
  get.path_and_query = "/api/v1/pods";
  post.method = "POST";
  post.path_and_query = "/api/v1/namespaces/a/pods";
  script->takes = std::chrono::milliseconds(20);
  ASSERT_TRUE(t.Send(get).ok());
  ASSERT_TRUE(t.Send(get).ok());
  script->status = 409;
  ASSERT_TRUE(t.Send(post).ok());
  script->status = 0;
  ASSERT_FALSE(t.Send(post).ok());
  script->status = 200;
  script->takes = std::chrono::milliseconds(3);
  ASSERT_TRUE(t.Stream(get, [](std::string_view) { return true; }, {}).ok());

  PrometheusText out;
  metrics.Render(&out);
  const std::string& m = out.str();
  for (const char* want : {
           "# TYPE rest_client_requests_total counter",
           "rest_client_requests_total{code=\"200\",method=\"GET\",host=\"10.0.0.1:6443\"} 3",
           "rest_client_requests_total{code=\"409\",method=\"POST\",host=\"10.0.0.1:6443\"} 1",
           "rest_client_requests_total{code=\"<error>\",method=\"POST\",host=\"10.0.0.1:6443\"} 1",
           "# TYPE rest_client_request_duration_seconds histogram",
           // Two GETs of 20 ms and a watch answered in 3 ms (its five open minutes not counted).
           "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"10.0.0.1:6443\","
           "le=\"0.005\"} 1",
           "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"10.0.0.1:6443\","
           "le=\"0.025\"} 3",
           "rest_client_request_duration_seconds_count{verb=\"GET\",host=\"10.0.0.1:6443\"} 3",
           "rest_client_request_duration_seconds_count{verb=\"POST\",host=\"10.0.0.1:6443\"} 2",
       }) {
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  }
}

}  // namespace
}  // namespace tj::kube
