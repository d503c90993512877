// Informer against the real API server: the cache converges to the server's objects, handlers
// see every change, indexes follow, a stale version is answered by a relist.
#include "kube/informer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "kube/object_meta.h"
#include "kube/work_queue.h"
#include "tests/integration/kube/local_cluster.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::Eventually;
using testing::LocalCluster;

// Every ConfigMap of these tests carries set=t; the informer selects on it, which keeps out the
// kube-root-ca.crt ConfigMap that the controller manager adds to every namespace.
json ConfigMap(const std::string& name, json labels) {
  labels["set"] = "t";
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", labels}}}};
}

TEST(KubeInformer, ConvergesAndFeedsAWorkQueue) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "informer");
  const auto& cm = resources::kConfigMaps;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client->Create(cm, ns, ConfigMap("pre" + std::to_string(i), {{"app", "a"}})).ok());
  }
  InformerOptions o;
  o.resource = cm;
  o.ns = ns;
  o.label_selector = "set=t";
  o.resync_period = std::chrono::milliseconds(500);
  Informer informer(client.get(), RealClock::Get(), o);
  WorkQueue queue(RealClock::Get());
  std::atomic<int> adds{0}, updates{0}, deletes{0}, resyncs{0};
  informer.AddHandlers({[&](const json& obj) {
                          ++adds;
                          queue.Add(ObjectKey(obj));
                        },
                        [&](const json& old_obj, const json& new_obj) {
                          if (old_obj == new_obj)
                            ++resyncs;
                          else
                            ++updates;
                          queue.Add(ObjectKey(new_obj));
                        },
                        [&](const json& last) {
                          ++deletes;
                          queue.Add(ObjectKey(last));
                        }});
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(20)));
  EXPECT_EQ(informer.cache().size(), 5u);
  EXPECT_EQ(adds.load(), 5);
  EXPECT_EQ(informer.cache().ByIndex(ObjectCache::kLabelIndex, "app=a").size(), 5u);

  ASSERT_TRUE(client->Create(cm, ns, ConfigMap("live", {{"app", "b"}})).ok());
  ASSERT_TRUE(
      client->Patch(cm, ns, "pre0", PatchType::kMerge, {{"metadata", {{"labels", {{"app", "b"}}}}}})
          .ok());
  ASSERT_TRUE(client->Delete(cm, ns, "pre1").ok());
  EXPECT_TRUE(Eventually([&] {
    return informer.cache().size() == 5 &&
           informer.cache().ByIndex(ObjectCache::kLabelIndex, "app=b").size() == 2 &&
           !informer.cache().Get(ns + "/pre1").has_value();
  }));
  EXPECT_EQ(adds.load(), 6);
  EXPECT_GE(updates.load(), 1);
  EXPECT_EQ(deletes.load(), 1);
  EXPECT_TRUE(Eventually([&] { return resyncs.load() >= 5; }, std::chrono::seconds(5)));
  EXPECT_EQ(informer.lists(), 1);  // no relist was needed

  // The cache agrees with a fresh list from the server.
  ListOptions lo;
  lo.label_selector = "set=t";
  auto list = client->List(cm, ns, lo);
  ASSERT_TRUE(list.ok());
  std::set<std::string> server, cached;
  for (const auto& item : (*list)["items"]) {
    server.insert(ObjectKey(item) + "@" + item["metadata"]["resourceVersion"].get<std::string>());
  }
  for (const auto& item : informer.cache().List()) {
    cached.insert(ObjectKey(item) + "@" + item["metadata"]["resourceVersion"].get<std::string>());
  }
  EXPECT_EQ(server, cached);
  informer.Stop();

  // Every key reached the queue, each once however often it changed.
  std::set<std::string> keys;
  while (auto k = queue.TryGet()) {
    keys.insert(*k);
    queue.Done(*k);
  }
  EXPECT_EQ(keys.size(), 6u);  // pre0..pre4 and live
}

// InformerOptions::keep: what it refuses never reaches the cache or the handlers, listed or
// watched; an object that stops passing leaves the cache as a deletion.
TEST(KubeInformer, KeepsOutWhatItsPredicateRefuses) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "informer-keep");
  const auto& cm = resources::kConfigMaps;
  ASSERT_TRUE(client->Create(cm, ns, ConfigMap("listed-in", {{"ours", "yes"}})).ok());
  ASSERT_TRUE(client->Create(cm, ns, ConfigMap("listed-out", {{"ours", "no"}})).ok());
  InformerOptions o;
  o.resource = cm;
  o.ns = ns;
  o.label_selector = "set=t";
  o.keep = [](const json& obj) { return LabelOf(obj, "ours") == "yes"; };
  Informer informer(client.get(), RealClock::Get(), o);
  std::mutex mu;
  std::vector<std::string> seen;  // "add name", "delete name"
  informer.AddHandlers({[&](const json& obj) {
                          std::lock_guard<std::mutex> lock(mu);
                          seen.push_back("add " + obj["metadata"]["name"].get<std::string>());
                        },
                        nullptr,
                        [&](const json& last) {
                          std::lock_guard<std::mutex> lock(mu);
                          seen.push_back("delete " + last["metadata"]["name"].get<std::string>());
                        }});
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(20)));
  EXPECT_EQ(informer.cache().Keys(), std::vector<std::string>{ns + "/listed-in"});

  ASSERT_TRUE(client->Create(cm, ns, ConfigMap("watched-out", {{"ours", "no"}})).ok());
  ASSERT_TRUE(client->Create(cm, ns, ConfigMap("watched-in", {{"ours", "yes"}})).ok());
  ASSERT_TRUE(client
                  ->Patch(cm, ns, "listed-in", PatchType::kMerge,
                          {{"metadata", {{"labels", {{"ours", "no"}}}}}})
                  .ok());
  ASSERT_TRUE(client->Delete(cm, ns, "watched-out").ok());
  EXPECT_TRUE(Eventually([&] {
    return informer.cache().Keys() == std::vector<std::string>{ns + "/watched-in"};
  })) << informer.cache().size();
  informer.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen,
            (std::vector<std::string>{"add listed-in", "add watched-in", "delete listed-in"}));
}

}  // namespace
}  // namespace tj::kube
