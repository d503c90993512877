#include "kube/object_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

namespace tj::kube {
namespace {

using nlohmann::json;

json Pod(const std::string& ns, const std::string& name, const std::string& rv,
         json labels = json::object(), const std::string& owner_uid = "") {
  json o = {{"metadata",
             {{"namespace", ns}, {"name", name}, {"resourceVersion", rv}, {"labels", labels}}}};
  if (!owner_uid.empty()) {
    o["metadata"]["ownerReferences"] = json::array({{{"uid", owner_uid}, {"kind", "Job"}}});
  }
  return o;
}

std::vector<std::string> Names(const std::vector<json>& v) {
  std::vector<std::string> n;
  n.reserve(v.size());
  for (const auto& o : v) n.push_back(o["metadata"]["name"]);
  std::sort(n.begin(), n.end());
  return n;
}
std::vector<std::string> Names(const std::vector<ObjectCache::Ptr>& v) {
  std::vector<json> objects;
  objects.reserve(v.size());
  for (const auto& o : v) objects.push_back(*o);
  return Names(objects);
}

TEST(ObjectCache, IndexesFollowUpsertsAndRemovals) {
  ObjectCache c;
  c.Upsert(Pod("a", "p1", "1", {{"app", "x"}}, "u1"));
  c.Upsert(Pod("a", "p2", "2", {{"app", "y"}}, "u1"));
  c.Upsert(Pod("b", "p1", "3", {{"app", "x"}}));
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(Names(c.ByIndex(ObjectCache::kNamespaceIndex, "a")),
            (std::vector<std::string>{"p1", "p2"}));
  EXPECT_EQ(c.ByIndex(ObjectCache::kLabelIndex, "app=x").size(), 2u);
  EXPECT_EQ(Names(c.ByIndex(ObjectCache::kOwnerIndex, "u1")),
            (std::vector<std::string>{"p1", "p2"}));
  // Relabel: the old index entry goes away.
  auto old = c.Upsert(Pod("a", "p1", "4", {{"app", "z"}}, "u1"));
  ASSERT_NE(old, nullptr);
  EXPECT_EQ((*old)["metadata"]["resourceVersion"], "1");
  EXPECT_EQ(c.ByIndex(ObjectCache::kLabelIndex, "app=x").size(), 1u);
  EXPECT_EQ(c.ByIndex(ObjectCache::kLabelIndex, "app=z").size(), 1u);
  EXPECT_NE(c.Remove("a/p2"), nullptr);
  EXPECT_EQ(c.Remove("a/p2"), nullptr);
  EXPECT_EQ(Names(c.ByIndex(ObjectCache::kOwnerIndex, "u1")), (std::vector<std::string>{"p1"}));
  EXPECT_TRUE(c.ByIndex("no-such-index", "x").empty());
  EXPECT_EQ(c.Get("b/p1").value()["metadata"]["resourceVersion"], "3");
}

// Counting by an index, and the first keys under a value, copy no object; they follow the
// objects as they change and go, a relist included.
TEST(ObjectCache, CountsAndKeysByIndex) {
  ObjectCache c;
  c.Upsert(Pod("a", "p2", "1", {{"app", "x"}}));
  c.Upsert(Pod("a", "p1", "2", {{"app", "x"}}));
  c.Upsert(Pod("b", "p3", "3", {{"app", "y"}}));
  EXPECT_EQ(c.CountByIndex(ObjectCache::kLabelIndex, "app=x"), 2u);
  EXPECT_EQ(c.KeysByIndex(ObjectCache::kLabelIndex, "app=x", 1),
            (std::vector<std::string>{"a/p1"}));  // in key order
  EXPECT_EQ(c.KeysByIndex(ObjectCache::kLabelIndex, "app=x", 5),
            (std::vector<std::string>{"a/p1", "a/p2"}));
  EXPECT_TRUE(c.KeysByIndex(ObjectCache::kLabelIndex, "app=x", 0).empty());
  c.Upsert(Pod("a", "p1", "4", {{"app", "y"}}));
  EXPECT_EQ(c.CountByIndex(ObjectCache::kLabelIndex, "app=x"), 1u);
  EXPECT_EQ(c.CountByIndex(ObjectCache::kLabelIndex, "app=y"), 2u);
  c.Remove("a/p2");
  EXPECT_EQ(c.CountByIndex(ObjectCache::kLabelIndex, "app=x"), 0u);
  EXPECT_TRUE(c.KeysByIndex(ObjectCache::kLabelIndex, "app=x", 5).empty());
  c.Replace({Pod("c", "p9", "5", {{"app", "y"}})});
  EXPECT_EQ(c.KeysByIndex(ObjectCache::kLabelIndex, "app=y", 5),
            (std::vector<std::string>{"c/p9"}));
  EXPECT_EQ(c.CountByIndex("no-such-index", "x"), 0u);
  EXPECT_TRUE(c.KeysByIndex("no-such-index", "x", 5).empty());
}

TEST(ObjectCache, ReplaceReportsTheDifference) {
  ObjectCache c;
  c.Upsert(Pod("a", "keep", "1"));
  c.Upsert(Pod("a", "change", "1"));
  c.Upsert(Pod("a", "gone", "1"));
  auto d = c.Replace({Pod("a", "keep", "1"), Pod("a", "change", "2"), Pod("a", "new", "5")});
  EXPECT_EQ(Names(d.added), (std::vector<std::string>{"new"}));
  ASSERT_EQ(d.updated.size(), 1u);
  EXPECT_EQ((*d.updated[0].first)["metadata"]["resourceVersion"], "1");
  EXPECT_EQ((*d.updated[0].second)["metadata"]["resourceVersion"], "2");
  EXPECT_EQ(Names(d.deleted), (std::vector<std::string>{"gone"}));
  EXPECT_EQ(c.ByIndex(ObjectCache::kNamespaceIndex, "a").size(), 3u);
}

TEST(ObjectCache, CustomIndexAndConcurrentWriters) {
  ObjectCache c;
  c.AddIndex("phase", [](const json& o) {
    return std::vector<std::string>{o.value("status", json::object()).value("phase", "")};
  });
  std::vector<std::thread> writers;
  writers.reserve(4);
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&c, t] {
      for (int i = 0; i < 200; ++i) {
        json p = Pod("ns", "p" + std::to_string(t) + "-" + std::to_string(i), "1");
        p["status"]["phase"] = i % 2 ? "Running" : "Pending";
        c.Upsert(p);
        c.List();
      }
    });
  }
  for (auto& w : writers) w.join();
  EXPECT_EQ(c.size(), 800u);
  EXPECT_EQ(c.ByIndex("phase", "Running").size(), 400u);
}

}  // namespace
}  // namespace tj::kube
