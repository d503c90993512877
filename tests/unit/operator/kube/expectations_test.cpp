#include "operator/kube/expectations.h"

#include <gtest/gtest.h>

#include <map>

namespace tj::kube {
namespace {

using nlohmann::json;

// A cache stand-in: "plural:ns/name" -> object.
struct FakeCaches {
  std::map<std::string, json> objects;
  Expectations::Lookup lookup() {
    return [this](const Resource& r, const std::string& key) -> std::optional<json> {
      auto it = objects.find(r.plural + ":" + key);
      if (it == objects.end()) return std::nullopt;
      return it->second;
    };
  }
};

json Obj(const std::string& uid, bool deleting = false) {
  json md = {{"uid", uid}};
  if (deleting) md["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  return {{"metadata", md}};
}

TEST(Expectations, NoneMeansNothingPending) {
  FakeClock clock;
  Expectations e(&clock, std::chrono::minutes(5));
  FakeCaches c;
  EXPECT_FALSE(e.Pending("ns/job", c.lookup()));
}

TEST(Expectations, CreatePendingUntilTheCacheHasTheObject) {
  FakeClock clock;
  Expectations e(&clock, std::chrono::minutes(5));
  FakeCaches c;
  e.ExpectCreate("ns/job", resources::kPods, "ns/job-worker-0");
  e.ExpectCreate("ns/job", resources::kServices, "ns/job");
  auto wait = e.Pending("ns/job", c.lookup());
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, std::chrono::minutes(5));
  c.objects["pods:ns/job-worker-0"] = Obj("u1");
  EXPECT_TRUE(e.Pending("ns/job", c.lookup()));  // the Service is still missing
  EXPECT_EQ(e.size(), 1u);
  c.objects["services:ns/job"] = Obj("u2");
  EXPECT_FALSE(e.Pending("ns/job", c.lookup()));
  EXPECT_EQ(e.size(), 0u);
  EXPECT_FALSE(e.Pending("ns/other", c.lookup()));  // keys are apart
}

TEST(Expectations, DeletePendingWhileTheSameObjectIsCachedAlive) {
  FakeClock clock;
  Expectations e(&clock, std::chrono::minutes(5));
  FakeCaches c;
  c.objects["pods:ns/p"] = Obj("u1");
  e.ExpectDelete("ns/job", resources::kPods, "ns/p", "u1");
  EXPECT_TRUE(e.Pending("ns/job", c.lookup()));
  c.objects["pods:ns/p"] = Obj("u1", /*deleting=*/true);
  EXPECT_FALSE(e.Pending("ns/job", c.lookup()));

  e.ExpectDelete("ns/job", resources::kPods, "ns/p", "u1");
  c.objects["pods:ns/p"] = Obj("u2");  // gone, and a new one of that name
  EXPECT_FALSE(e.Pending("ns/job", c.lookup()));

  e.ExpectDelete("ns/job", resources::kPods, "ns/p", "u2");
  c.objects.clear();
  EXPECT_FALSE(e.Pending("ns/job", c.lookup()));
}

TEST(Expectations, ExpireAfterTheTtl) {
  FakeClock clock;
  Expectations e(&clock, std::chrono::seconds(10));
  FakeCaches c;
  e.ExpectCreate("ns/job", resources::kPods, "ns/p");
  clock.Advance(std::chrono::seconds(4));
  auto wait = e.Pending("ns/job", c.lookup());
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, std::chrono::seconds(6));
  clock.Advance(std::chrono::seconds(6));
  EXPECT_FALSE(e.Pending("ns/job", c.lookup()));
}

TEST(Expectations, ForgetAndClear) {
  FakeClock clock;
  Expectations e(&clock, std::chrono::minutes(5));
  FakeCaches c;
  e.ExpectCreate("ns/job", resources::kPods, "ns/p");
  e.Forget("ns/job", resources::kPods, "ns/p");  // the create failed
  EXPECT_FALSE(e.Pending("ns/job", c.lookup()));
  e.ExpectCreate("ns/job", resources::kPods, "ns/p");
  e.ExpectCreate("ns/job", resources::kSecrets, "ns/s");
  e.Clear("ns/job");
  EXPECT_FALSE(e.Pending("ns/job", c.lookup()));
  EXPECT_EQ(e.size(), 0u);
}

}  // namespace
}  // namespace tj::kube
