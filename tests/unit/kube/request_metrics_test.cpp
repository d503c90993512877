// rest_client_* from every request through MeteredTransport: status codes, transport errors,
// latency on the injected clock, and a watch counted once when its answer starts.
#include "kube/request_metrics.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/fake_transport.h"

namespace tj::kube {
namespace {

using tj::testing::FakeTransport;

TEST(RequestMetrics, HostOfServer) {
  EXPECT_EQ(RequestMetrics::HostOf("https://10.0.0.1:6443"), "10.0.0.1:6443");
  EXPECT_EQ(RequestMetrics::HostOf("https://[::1]:6443/prefix"), "[::1]:6443");
  EXPECT_EQ(RequestMetrics::HostOf("kube:8080"), "kube:8080");
}

TEST(RequestMetrics, CountsCodesMethodsAndLatencyLikeClientGo) {
  FakeClock clock;
  RequestMetrics metrics("10.0.0.1:6443");
  auto inner = std::make_unique<FakeTransport>(&clock);
  FakeTransport* script = inner.get();
  script->otherwise = FakeTransport::Answer(200);
  // A watch's events five minutes apart: it stays open, which is not latency.
  script->between_lines = std::chrono::minutes(5);
  MeteredTransport t(std::move(inner), &metrics, &clock);
  HttpRequest get, post;
  get.method = "GET";
  get.path_and_query = "/api/v1/pods";
  post.method = "POST";
  post.path_and_query = "/api/v1/namespaces/a/pods";
  script->takes = std::chrono::milliseconds(20);
  ASSERT_TRUE(t.Send(get).ok());
  ASSERT_TRUE(t.Send(get).ok());
  script->otherwise = FakeTransport::Answer(409);
  ASSERT_TRUE(t.Send(post).ok());
  script->otherwise = FakeTransport::NoAnswer("connection refused");
  ASSERT_FALSE(t.Send(post).ok());
  script->otherwise = FakeTransport::Answer(200, "{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\n");
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
