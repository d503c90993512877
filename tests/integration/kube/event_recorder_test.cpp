#include "kube/event_recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "tests/integration/kube/local_cluster.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::LocalCluster;

// A namespace of its own with a ConfigMap "subject" to record Events about.
class KubeEventRecorder : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster* cluster;
    TJ_REQUIRE_LOCAL_CLUSTER(cluster);
    client = cluster->NewClient();
    ns = testing::NewNamespace(client.get(), "events");
    auto created = client->Create(
        resources::kConfigMaps, ns,
        {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "subject"}}}});
    ASSERT_TRUE(created.ok()) << created.status().message();
    obj = *created;
  }
  std::unique_ptr<RestClient> client;
  std::string ns;
  std::optional<json> obj;
};

TEST_F(KubeEventRecorder, RepeatsAreCountedNotDuplicated) {
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

// While the controller is busy an Event waits (at most the given delay), and it carries the
// time it was recorded, not the time it was sent.
TEST_F(KubeEventRecorder, AsyncEventsGiveWayWhileBusyAndKeepTheirTime) {
  const WallTime recorded = ParseTime("2026-01-02T03:04:05Z").value();
  std::atomic<WallTime> wall{recorded};
  std::atomic<bool> busy{true};
  EventRecorder recorder(client.get(), "tj-operator", "test-host", [&] { return wall.load(); });
  recorder.DeferWhile([&] { return busy.load(); }, std::chrono::minutes(5));
  auto count = [&](const std::string& reason) {
    ListOptions lo;
    lo.field_selector = "involvedObject.name=subject,reason=" + reason;
    auto events = client->List(resources::kEvents, ns, lo);
    EXPECT_TRUE(events.ok()) << events.status().message();
    return events.ok() ? (*events)["items"].size() : size_t{0};
  };

  recorder.RecordAsync(*obj, "Normal", "CreatedPods", "created subject-worker-0");
  wall = recorded + std::chrono::hours(1);
  EXPECT_FALSE(recorder.Flush(std::chrono::milliseconds(500))) << "sent while busy";
  EXPECT_EQ(count("CreatedPods"), 0u);
  busy = false;
  ASSERT_TRUE(recorder.Flush(std::chrono::seconds(10)));
  ListOptions lo;
  lo.field_selector = "involvedObject.name=subject,reason=CreatedPods";
  auto events = client->List(resources::kEvents, ns, lo);
  ASSERT_TRUE(events.ok()) << events.status().message();
  ASSERT_EQ((*events)["items"].size(), 1u);
  EXPECT_EQ((*events)["items"][0]["firstTimestamp"], "2026-01-02T03:04:05Z");

  // Busy for ever: sent once its delay is up.
  EventRecorder bounded(client.get(), "tj-operator", "test-host");
  bounded.DeferWhile([] { return true; }, std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  bounded.RecordAsync(*obj, "Warning", "GangRestart", "worker-0 failed");
  ASSERT_TRUE(bounded.Flush(std::chrono::seconds(10)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));
  EXPECT_EQ(count("GangRestart"), 1u);
}

}  // namespace
}  // namespace tj::kube
