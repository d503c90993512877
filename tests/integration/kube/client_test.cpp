// RestClient against the real API server: CRUD, conflicts, patches of every kind, deletion
// with preconditions, a custom resource's status subresource, watches.
#include <gtest/gtest.h>

#include <thread>

#include "tests/integration/kube/local_cluster.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::Eventually;
using testing::LocalCluster;

json ConfigMap(const std::string& name, json data = json::object(), json labels = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", labels}}},
          {"data", data}};
}

TEST(KubeClient, CreateGetListUpdateConflictDelete) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "crud");
  const auto& cm = resources::kConfigMaps;

  auto created = client->Create(cm, ns, ConfigMap("a", {{"k", "1"}}));
  ASSERT_TRUE(created.ok()) << created.status().message();
  auto dup = client->Create(cm, ns, ConfigMap("a"));
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(IsAlreadyExists(dup.error())) << dup.error().ToString();

  auto got = client->Get(cm, ns, "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["data"]["k"], "1");
  auto missing = client->Get(cm, ns, "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(IsNotFound(missing.error()));
  EXPECT_EQ(missing.error().reason, "NotFound");
  EXPECT_NE(missing.error().message.find("\"nope\" not found"), std::string::npos);

  // Optimistic concurrency: an update from a stale copy is a 409, a re-read one succeeds.
  json stale = *got;
  json fresh = *got;
  fresh["data"]["k"] = "2";
  ASSERT_TRUE(client->Update(cm, ns, fresh).ok());
  stale["data"]["k"] = "3";
  auto conflict = client->Update(cm, ns, stale);
  ASSERT_FALSE(conflict.ok());
  EXPECT_TRUE(IsConflict(conflict.error())) << conflict.error().ToString();
  auto reread = client->Get(cm, ns, "a");
  (*reread)["data"]["k"] = "3";
  ASSERT_TRUE(client->Update(cm, ns, *reread).ok());
  EXPECT_EQ((*client->Get(cm, ns, "a"))["data"]["k"], "3");

  // Pagination: 7 objects in pages of 2 come back as one list.
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(
        client->Create(cm, ns, ConfigMap("p" + std::to_string(i), {}, {{"page", "yes"}})).ok());
  }
  ListOptions lo;
  lo.page_size = 2;
  auto all = client->List(cm, ns, lo);
  ASSERT_TRUE(all.ok()) << all.status().message();
  // 7 of ours; the controller manager also publishes kube-root-ca.crt in every namespace.
  size_t ours = 0;
  for (const auto& item : (*all)["items"]) ours += item["metadata"]["name"] != "kube-root-ca.crt";
  EXPECT_EQ(ours, 7u);
  EXPECT_FALSE((*all)["metadata"]["resourceVersion"].get<std::string>().empty());
  lo.label_selector = "page=yes";
  EXPECT_EQ((*client->List(cm, ns, lo))["items"].size(), 6u);

  // Delete with a wrong uid precondition is refused; with the right one it goes.
  DeleteOptions wrong;
  wrong.precondition_uid = "00000000-0000-0000-0000-000000000000";
  auto refused = client->Delete(cm, ns, "a", wrong);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, 409) << refused.error().ToString();
  DeleteOptions right;
  right.precondition_uid = (*reread)["metadata"]["uid"].get<std::string>();
  right.propagation_policy = "Background";
  ASSERT_TRUE(client->Delete(cm, ns, "a", right).ok());
  EXPECT_TRUE(IsNotFound(client->Get(cm, ns, "a").error()));
}

TEST(KubeClient, MergeJsonAndServerSideApplyPatches) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "patch");
  const auto& cm = resources::kConfigMaps;
  ASSERT_TRUE(client->Create(cm, ns, ConfigMap("c", {{"a", "1"}, {"b", "2"}})).ok());

  auto merged =
      client->Patch(cm, ns, "c", PatchType::kMerge, {{"data", {{"a", "x"}, {"b", nullptr}}}});
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  EXPECT_EQ((*merged)["data"], json({{"a", "x"}}));

  auto jsonp = client->Patch(cm, ns, "c", PatchType::kJson,
                             json::array({{{"op", "add"}, {"path", "/data/j"}, {"value", "v"}}}));
  ASSERT_TRUE(jsonp.ok()) << jsonp.status().message();
  EXPECT_EQ((*jsonp)["data"]["j"], "v");

  auto bad = client->Patch(cm, ns, "c", PatchType::kJson,
                           json::array({{{"op", "test"}, {"path", "/data/j"}, {"value", "no"}}}));
  EXPECT_FALSE(bad.ok());

  PatchOptions apply;
  apply.field_manager = "tj-test";
  apply.force = true;
  auto applied = client->Patch(cm, ns, "applied", PatchType::kApply,
                               ConfigMap("applied", {{"owned", "by-apply"}}), apply);
  ASSERT_TRUE(applied.ok()) << applied.status().message();
  EXPECT_EQ((*applied)["data"]["owned"], "by-apply");
  bool manager_seen = false;
  for (const auto& mf : (*applied)["metadata"]["managedFields"]) {
    if (mf.value("manager", "") == "tj-test" && mf.value("operation", "") == "Apply") {
      manager_seen = true;
    }
  }
  EXPECT_TRUE(manager_seen);
}

TEST(KubeClient, CustomResourceStatusSubresource) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  json crd = json::parse(R"({
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.tjo.dev"},
    "spec": {"group": "test.tjo.dev", "scope": "Namespaced",
      "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
      "versions": [{"name": "v1", "served": true, "storage": true,
        "subresources": {"status": {}},
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
          "spec": {"type": "object", "properties": {"size": {"type": "integer", "minimum": 1}}},
          "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}})");
  auto c = client->Create(resources::kCustomResourceDefinitions, "", crd);
  ASSERT_TRUE(c.ok() || IsAlreadyExists(c.error())) << c.status().message();
  Resource widgets{"test.tjo.dev/v1", "widgets"};
  std::string ns = testing::NewNamespace(client.get(), "crd");
  // The CRD is served once it is Established.
  ASSERT_TRUE(Eventually([&] { return client->List(widgets, ns).ok(); }));

  json w = {{"apiVersion", "test.tjo.dev/v1"},
            {"kind", "Widget"},
            {"metadata", {{"name", "w"}}},
            {"spec", {{"size", 3}}},
            {"status", {{"phase", "ignored-on-create"}}}};
  auto created = client->Create(widgets, ns, w);
  ASSERT_TRUE(created.ok()) << created.status().message();
  EXPECT_FALSE(created->contains("status"));  // the main resource ignores status

  json bad = w;
  bad["metadata"]["name"] = "bad";
  bad["spec"]["size"] = 0;
  auto invalid = client->Create(widgets, ns, bad);
  ASSERT_FALSE(invalid.ok());
  EXPECT_TRUE(IsInvalid(invalid.error())) << invalid.error().ToString();
  EXPECT_NE(invalid.error().message.find("spec.size"), std::string::npos);

  json with_status = *created;
  with_status["status"] = {{"phase", "Running"}};
  auto st = client->UpdateStatus(widgets, ns, with_status);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ((*st)["status"]["phase"], "Running");
  PatchOptions sub;
  sub.subresource = "status";
  auto patched = client->Patch(widgets, ns, "w", PatchType::kMerge,
                               {{"status", {{"phase", "Done"}}}, {"spec", {{"size", 9}}}}, sub);
  ASSERT_TRUE(patched.ok()) << patched.status().message();
  EXPECT_EQ((*patched)["status"]["phase"], "Done");
  EXPECT_EQ((*patched)["spec"]["size"], 3);  // the status subresource ignores spec
}

TEST(KubeClient, WatchStreamsChangesInOrderWithBookmarks) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "watch");
  const auto& cm = resources::kConfigMaps;
  auto list = client->List(cm, ns);
  ASSERT_TRUE(list.ok());
  std::mutex mu;
  std::vector<std::pair<WatchEvent::Type, std::string>> seen;
  WatchOptions wo;
  wo.resource_version = (*list)["metadata"]["resourceVersion"];
  wo.timeout_seconds = 10;  // the server sends a bookmark shortly before it ends the watch
  Result<WatchSummary> summary = ApiError{};
  std::thread watcher([&] {
    summary = client->Watch(cm, ns, wo, [&](const WatchEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      std::string name = ev.object["metadata"].value("name", "");
      // The controller manager publishes kube-root-ca.crt into every new namespace.
      if (name != "kube-root-ca.crt") seen.emplace_back(ev.type, name);
      return true;
    });
  });
  ASSERT_TRUE(client->Create(cm, ns, ConfigMap("w1")).ok());
  ASSERT_TRUE(client->Patch(cm, ns, "w1", PatchType::kMerge, {{"data", {{"x", "y"}}}}).ok());
  ASSERT_TRUE(client->Delete(cm, ns, "w1").ok());
  watcher.join();  // the server ends the watch after 10 s
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen[0], std::make_pair(WatchEvent::Type::kAdded, std::string("w1")));
  EXPECT_EQ(seen[1], std::make_pair(WatchEvent::Type::kModified, std::string("w1")));
  EXPECT_EQ(seen[2], std::make_pair(WatchEvent::Type::kDeleted, std::string("w1")));
  int bookmarks = 0;
  for (const auto& s : seen) bookmarks += s.first == WatchEvent::Type::kBookmark;
  // The server's bookmark is due 2 s before the watch's end, on a 1 s timer: on a busy
  // machine it can miss that window. Quiet watches from the last version, up to two more,
  // until one brings a bookmark.
  std::string from = summary->last_resource_version;
  for (int more = 0; bookmarks == 0 && more < 2; ++more) {
    wo.resource_version = from;
    // A bookmark carries the newest version the server has seen: only newer than the
    // watch's start once something changed, so each retry changes something.
    std::thread change([&, more] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      (void)client->Create(cm, ns, ConfigMap("again-" + std::to_string(more)));
    });
    auto again = client->Watch(cm, ns, wo, [&](const WatchEvent& ev) {
      bookmarks += ev.type == WatchEvent::Type::kBookmark;
      return true;
    });
    change.join();
    ASSERT_TRUE(again.ok()) << again.status().message();
    if (!again->last_resource_version.empty()) from = again->last_resource_version;
  }
  EXPECT_GE(bookmarks, 1);
  EXPECT_FALSE(summary->last_resource_version.empty());
}

TEST(KubeClient, WatchCanBeStopped) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  const auto& cm = resources::kConfigMaps;
  // stop_token ends a quiet watch at once.
  std::stop_source stop;
  auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.request_stop();
  });
  auto quiet = client->Watch(
      cm, "no-such-namespace", {}, [](const WatchEvent&) { return true; }, stop.get_token());
  stopper.join();
  EXPECT_TRUE(quiet.ok()) << quiet.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace tj::kube
