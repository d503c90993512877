// RestClient's own logic (retries, Retry-After, paging, errors, token rotation) on a scripted
// HTTP transport: the real API server cannot be made to answer 429 or 503 on demand. The
// same calls against the real server are in tests/integration/kube/.
#include "kube/rest_client.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/fake_transport.h"
#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using tj::testing::FakeTransport;
using tj::testing::TempDir;
using tj::testing::WriteBytes;

HttpResponse Resp(int status, const json& body, std::map<std::string, std::string> headers = {}) {
  return HttpResponse{status, body.dump(), std::move(headers)};
}

json StatusBody(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"}, {"code", code}, {"reason", reason}, {"message", message}};
}

struct Fixture {
  FakeClock clock;
  FakeTransport* t = new FakeTransport;
  std::unique_ptr<RestClient> client;
  explicit Fixture(RestConfig c = {}) {
    c.server = "https://x";
    c.qps = 0;
    client = std::make_unique<RestClient>(c, std::unique_ptr<HttpTransport>(t), &clock);
  }
};

TEST(RestClient, RetriesTooManyRequestsHonouringRetryAfter) {
  Fixture f;
  f.t->answers = {
      Resp(429, StatusBody(429, "TooManyRequests", "slow down"), {{"retry-after", "3"}}),
      Resp(201, {{"metadata", {{"name", "p"}}}})};
  auto t0 = f.clock.Now();
  auto r = f.client->Create(resources::kPods, "ns", {{"metadata", {{"name", "p"}}}});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(f.t->requests.size(), 2u);
  EXPECT_EQ(f.clock.Now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(f.t->requests[0].path_and_query, "/api/v1/namespaces/ns/pods");
  EXPECT_EQ(f.t->requests[0].method, "POST");
}

TEST(RestClient, GetRetries5xxWithBackoffButPostDoesNot) {
  Fixture f;
  f.t->answers = {Resp(503, StatusBody(503, "ServiceUnavailable", "x")),
                  Resp(500, StatusBody(500, "InternalError", "x")), Resp(200, {{"a", 1}})};
  auto t0 = f.clock.Now();
  auto r = f.client->Get(resources::kPods, "ns", "p");
  ASSERT_TRUE(r.ok());
  EXPECT_GE(f.clock.Now() - t0, std::chrono::milliseconds(300));  // 100 ms + 200 ms (+jitter)

  Fixture g;
  g.t->answers = {Resp(500, StatusBody(500, "InternalError", "boom"))};
  auto c = g.client->Create(resources::kPods, "ns", json::object());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, 500);
  EXPECT_EQ(g.t->requests.size(), 1u);
}

TEST(RestClient, GivesUpAfterMaxRetries) {
  RestConfig c;
  c.max_retries = 2;
  Fixture f(c);
  for (int i = 0; i < 5; ++i)
    f.t->answers.push_back(Resp(429, StatusBody(429, "TooManyRequests", "")));
  auto r = f.client->Get(resources::kPods, "ns", "p");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, 429);
  EXPECT_EQ(f.t->requests.size(), 3u);
}

TEST(RestClient, ErrorsCarryTheApiStatus) {
  Fixture f;
  f.t->answers = {Resp(404, StatusBody(404, "NotFound", "pods \"p\" not found"))};
  auto r = f.client->Get(resources::kPods, "ns", "p");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(IsNotFound(r.error()));
  EXPECT_EQ(r.error().reason, "NotFound");
  EXPECT_EQ(r.status().message(),
            "GET /api/v1/namespaces/ns/pods/p: 404 NotFound: pods \"p\" not found");
}

TEST(RestClient, ListFollowsContinueTokens) {
  Fixture f;
  f.t->answers = {Resp(200, {{"metadata", {{"resourceVersion", "7"}, {"continue", "tok en"}}},
                             {"items", {{{"n", 1}}, {{"n", 2}}}}}),
                  Resp(200, {{"metadata", {{"resourceVersion", "9"}}}, {"items", {{{"n", 3}}}}})};
  ListOptions o;
  o.page_size = 2;
  o.label_selector = "app=x";
  auto r = f.client->List(resources::kPods, "", o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["items"].size(), 3u);
  EXPECT_EQ((*r)["metadata"]["resourceVersion"], "7");
  EXPECT_EQ(f.t->requests[0].path_and_query, "/api/v1/pods?labelSelector=app%3Dx&limit=2");
  EXPECT_EQ(f.t->requests[1].path_and_query,
            "/api/v1/pods?labelSelector=app%3Dx&limit=2&continue=tok%20en");
}

TEST(RestClient, PatchAndDeleteShapes) {
  Fixture f;
  f.t->answers = {Resp(200, json::object()), Resp(200, json::object()), Resp(200, json::object())};
  PatchOptions apply;
  apply.field_manager = "tj";
  apply.force = true;
  ASSERT_TRUE(f.client
                  ->Patch(resources::kConfigMaps, "ns", "c", PatchType::kApply,
                          {{"data", {{"k", "v"}}}}, apply)
                  .ok());
  EXPECT_EQ(f.t->requests[0].content_type, "application/apply-patch+yaml");
  EXPECT_EQ(f.t->requests[0].path_and_query,
            "/api/v1/namespaces/ns/configmaps/c?fieldManager=tj&force=true");
  PatchOptions status;
  status.subresource = "status";
  ASSERT_TRUE(f.client
                  ->Patch({"tjo.dev/v1alpha1", "trainingjobs"}, "ns", "j", PatchType::kMerge,
                          {{"status", json::object()}}, status)
                  .ok());
  EXPECT_EQ(f.t->requests[1].path_and_query,
            "/apis/tjo.dev/v1alpha1/namespaces/ns/trainingjobs/j/status");
  DeleteOptions d;
  d.propagation_policy = "Foreground";
  d.precondition_uid = "u-1";
  ASSERT_TRUE(f.client->Delete(resources::kPods, "ns", "p", d).ok());
  auto body = json::parse(f.t->requests[2].body);
  EXPECT_EQ(body["propagationPolicy"], "Foreground");
  EXPECT_EQ(body["preconditions"]["uid"], "u-1");
  // Apply without a field manager is refused before any request.
  EXPECT_FALSE(f.client->Patch(resources::kPods, "ns", "p", PatchType::kApply, {}).ok());
  EXPECT_EQ(f.t->requests.size(), 3u);
}

TEST(RestClient, TokenFileIsReReadWhenItRotates) {
  const TempDir dir("tj-token");
  const std::string path = dir.Write("token", "first\n");
  RestConfig c;
  c.token_file = path;
  Fixture f(c);
  for (int i = 0; i < 4; ++i) f.t->answers.push_back(Resp(200, json::object()));
  ASSERT_TRUE(f.client->Get(resources::kPods, "ns", "p").ok());
  WriteBytes(path, "second\n");
  ASSERT_TRUE(f.client->Get(resources::kPods, "ns", "p").ok());  // cached for a minute
  f.clock.Advance(std::chrono::seconds(61));
  ASSERT_TRUE(f.client->Get(resources::kPods, "ns", "p").ok());
  EXPECT_EQ(f.t->requests[0].authorization, "Bearer first");
  EXPECT_EQ(f.t->requests[1].authorization, "Bearer first");
  EXPECT_EQ(f.t->requests[2].authorization, "Bearer second");
}

TEST(RestClient, WatchReportsGoneAsHttpStatus) {
  Fixture f;
  f.t->answers = {Resp(410, StatusBody(410, "Gone", "too old"))};
  auto r = f.client->Watch(resources::kPods, "ns", {}, [](const WatchEvent&) { return true; });
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(IsGone(r.error()));
  EXPECT_NE(f.t->requests[0].path_and_query.find("allowWatchBookmarks=true"), std::string::npos);
}

}  // namespace
}  // namespace tj::kube
