#include "operator/kube/event_recorder.h"

#include <gtest/gtest.h>

#include "tests/integration/kube/local_cluster.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::LocalCluster;

TEST(KubeEventRecorder, RepeatsAreCountedNotDuplicated) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "events");
  auto obj = client->Create(
      resources::kConfigMaps, ns,
      {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "subject"}}}});
  ASSERT_TRUE(obj.ok());
  EventRecorder recorder(client.get(), "tj-operator", "test-host");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(recorder.Record(*obj, "Warning", "BackOff", "restarting the gang").ok());
  }
  ASSERT_TRUE(recorder.Record(*obj, "Normal", "Created", "created pod subject-worker-0").ok());
  ListOptions lo;
  lo.field_selector = "involvedObject.name=subject";
  auto events = client->List(resources::kEvents, ns, lo);
  ASSERT_TRUE(events.ok()) << events.status().message();
  ASSERT_EQ((*events)["items"].size(), 2u);
  for (const auto& ev : (*events)["items"]) {
    EXPECT_EQ(ev["involvedObject"]["uid"], (*obj)["metadata"]["uid"]);
    EXPECT_EQ(ev["source"]["component"], "tj-operator");
    if (ev["reason"] == "BackOff") {
      EXPECT_EQ(ev["count"], 3);
      EXPECT_EQ(ev["type"], "Warning");
    } else {
      EXPECT_EQ(ev["reason"], "Created");
      EXPECT_EQ(ev["count"], 1);
    }
  }
  // An object without a name is refused with a message, not a crash.
  Status bad = recorder.Record(json::object(), "Normal", "X", "y");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("metadata.name"), std::string::npos);
}

}  // namespace
}  // namespace tj::kube
