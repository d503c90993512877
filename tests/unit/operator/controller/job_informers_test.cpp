// Which of the operator's optional informers it may run (operator/controller/job_informers.h):
// a kind it watches only where the API server serves it and lets it be listed, and whether the
// server serves it at all (native PodGroups), from one discovery answer.
#include "operator/controller/job_informers.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "operator/controller/gang_scheduling.h"
#include "tests/support/fake_client.h"

namespace tj::controller {
namespace {

using nlohmann::json;

using tj::testing::ApiErrorOf;
using tj::testing::FakeClient;

// The discovery request of the native PodGroups' group and version.
const std::string kDiscovery = "GET /apis/scheduling.k8s.io/v1beta1";

// The raw requests ("GET /apis/..."), in order.
std::vector<std::string> RawRequests(const FakeClient& client) {
  std::vector<std::string> out;
  for (const FakeClient::Call& c : client.Calls(FakeClient::Verb::kRaw)) out.push_back(c.request);
  return out;
}

// Discovery first: no list of an unserved kind reaches the audit log; a kind served but not
// listable is served (jobs get native PodGroups) and not watched.
TEST(Watchable, AKindIsWatchedWhereServedAndListable) {
  FakeClient client;
  const std::vector<const kube::Resource*> native = {&gang::kNativePodGroups};
  auto w = Watchable(client, native, "");
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->watchable);
  EXPECT_FALSE(w->served);  // 404: the version is off
  EXPECT_EQ(w->why_not, "the API server serves no podgroups.scheduling.k8s.io/v1beta1");
  EXPECT_EQ(RawRequests(client), std::vector<std::string>{kDiscovery});
  json discovery = {{"resources", json::array({{{"name", "workloads"}}})}};
  client.AnswerRaw(kDiscovery, discovery);
  w = Watchable(client, native, "");
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->served) << "the version is served, not the kind";
  discovery["resources"].push_back({{"name", "podgroups"}});
  client.AnswerRaw(kDiscovery, discovery);
  client.AnswerRaw(kDiscovery + "/namespaces/team-a/podgroups?limit=1",
                   ApiErrorOf(403, "Forbidden", "cannot list"));
  w = Watchable(client, native, "team-a");
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->watchable);
  EXPECT_TRUE(w->served);
  EXPECT_EQ(w->why_not, "the operator may not list podgroups.scheduling.k8s.io/v1beta1");
  EXPECT_EQ(RawRequests(client).back(),
            "GET /apis/scheduling.k8s.io/v1beta1/namespaces/team-a/podgroups?limit=1");
  client.AnswerRaw(kDiscovery + "/podgroups?limit=1", {{"items", json::array()}});
  w = Watchable(client, native, "");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->watchable);
  EXPECT_TRUE(w->served);
}

// Nodes, cluster-scoped: listed without a namespace whatever the operator watches; one the
// operator may not list is served and not watched (the lost-node rules are off).
TEST(Watchable, NodesAreListedClusterWide) {
  FakeClient client;
  client.AnswerRaw("GET /api/v1", {{"resources", json::array({{{"name", "nodes"}}})}});
  client.AnswerRaw("GET /api/v1/nodes?limit=1", ApiErrorOf(403, "Forbidden", "cannot list"));
  auto w = Watchable(client, {&kube::resources::kNodes}, "team-a");
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->watchable);
  EXPECT_TRUE(w->served);
  EXPECT_EQ(w->why_not, "the operator may not list nodes.v1");
  client.AnswerRaw("GET /api/v1/nodes?limit=1", {{"items", json::array()}});
  w = Watchable(client, {&kube::resources::kNodes}, "team-a");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->watchable);
}

}  // namespace
}  // namespace tj::controller
