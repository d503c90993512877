// Which of the operator's optional informers it may run (operator/controller/job_informers.h):
// a kind it watches only where the API server serves it and lets it be listed, and whether the
// server serves it at all (native PodGroups), from one discovery answer.
#include "operator/controller/job_informers.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "operator/controller/gang_scheduling.h"
#include "tests/support/accepting_client.h"

namespace tj::controller {
namespace {

using nlohmann::json;

// Answers discovery (`discovery`, a 404 while null) and lists of one item (`list_error` when
// set); records each request.
class DiscoveryClient : public tj::testing::AcceptingClient {
 public:
  kube::Result<json> Raw(const std::string& method, const std::string& path,
                         const std::optional<json>&) override {
    raw.push_back(method + " " + path);
    if (path.find("?limit=") != std::string::npos) {  // a list
      if (list_error) return *list_error;
      return json{{"items", json::array()}};
    }
    if (discovery.is_null()) return tj::testing::ApiErrorOf(404, "NotFound", "not found");
    return discovery;
  }
  std::vector<std::string> raw;
  std::optional<kube::ApiError> list_error;
  json discovery;
};

// Discovery first: no list of an unserved kind reaches the audit log; a kind served but not
// listable is served (jobs get native PodGroups) and not watched.
TEST(Watchable, AKindIsWatchedWhereServedAndListable) {
  DiscoveryClient client;
  const std::vector<const kube::Resource*> native = {&gang::kNativePodGroups};
  auto w = Watchable(client, native, "");
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->watchable);
  EXPECT_FALSE(w->served);  // 404: the version is off
  EXPECT_EQ(w->why_not, "the API server serves no podgroups.scheduling.k8s.io/v1beta1");
  EXPECT_EQ(client.raw, std::vector<std::string>{"GET /apis/scheduling.k8s.io/v1beta1"});
  client.discovery = {{"resources", json::array({{{"name", "workloads"}}})}};
  w = Watchable(client, native, "");
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->served) << "the version is served, not the kind";
  client.discovery["resources"].push_back({{"name", "podgroups"}});
  client.list_error = tj::testing::ApiErrorOf(403, "Forbidden", "cannot list");
  w = Watchable(client, native, "team-a");
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->watchable);
  EXPECT_TRUE(w->served);
  EXPECT_EQ(w->why_not, "the operator may not list podgroups.scheduling.k8s.io/v1beta1");
  EXPECT_EQ(client.raw.back(),
            "GET /apis/scheduling.k8s.io/v1beta1/namespaces/team-a/podgroups?limit=1");
  client.list_error.reset();
  w = Watchable(client, native, "");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->watchable);
  EXPECT_TRUE(w->served);
}

}  // namespace
}  // namespace tj::controller
