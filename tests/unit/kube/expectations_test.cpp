#include "kube/expectations.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>

namespace tj::kube {
namespace {

using nlohmann::json;

// A cache stand-in: "plural:ns/name" -> object.
struct FakeCaches {
  std::map<std::string, json> objects;
  Expectations::Lookup lookup() {
    return [this](const Resource& r, const std::string& key) -> std::shared_ptr<const json> {
      auto it = objects.find(r.plural + ":" + key);
      if (it == objects.end()) return nullptr;
      return std::make_shared<const json>(it->second);
    };
  }
};

json Obj(const std::string& uid, bool deleting = false) {
  json md = {{"uid", uid}};
  if (deleting) md["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  return {{"metadata", md}};
}

// Expectations with a five-minute TTL on a fake clock, over an empty cache stand-in.
class ExpectationsTest : public ::testing::Test {
 protected:
  std::optional<Clock::Duration> Pending(const std::string& key) {
    return e.Pending(key, c.lookup());
  }
  FakeClock clock;
  Expectations e{&clock, std::chrono::minutes(5)};
  FakeCaches c;
};

TEST_F(ExpectationsTest, NoneMeansNothingPending) { EXPECT_FALSE(Pending("ns/job")); }

TEST_F(ExpectationsTest, CreatePendingUntilTheCacheHasTheObject) {
  e.ExpectCreate("ns/job", resources::kPods, "ns/job-worker-0");
  e.ExpectCreate("ns/job", resources::kServices, "ns/job");
  auto wait = Pending("ns/job");
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, std::chrono::minutes(5));
  c.objects["pods:ns/job-worker-0"] = Obj("u1");
  EXPECT_TRUE(Pending("ns/job"));  // the Service is still missing
  EXPECT_EQ(e.size(), 1u);
  c.objects["services:ns/job"] = Obj("u2");
  EXPECT_FALSE(Pending("ns/job"));
  EXPECT_EQ(e.size(), 0u);
  EXPECT_FALSE(Pending("ns/other"));  // keys are apart
}

TEST_F(ExpectationsTest, DeletePendingWhileTheSameObjectIsCachedAlive) {
  c.objects["pods:ns/p"] = Obj("u1");
  e.ExpectDelete("ns/job", resources::kPods, "ns/p", "u1");
  EXPECT_TRUE(Pending("ns/job"));
  c.objects["pods:ns/p"] = Obj("u1", /*deleting=*/true);
  EXPECT_FALSE(Pending("ns/job"));

  e.ExpectDelete("ns/job", resources::kPods, "ns/p", "u1");
  c.objects["pods:ns/p"] = Obj("u2");  // gone, and a new one of that name
  EXPECT_FALSE(Pending("ns/job"));

  e.ExpectDelete("ns/job", resources::kPods, "ns/p", "u2");
  c.objects.clear();
  EXPECT_FALSE(Pending("ns/job"));
}

TEST_F(ExpectationsTest, ExpireAfterTheTtl) {
  e.ExpectCreate("ns/job", resources::kPods, "ns/p");
  clock.Advance(std::chrono::minutes(4));
  auto wait = Pending("ns/job");
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, std::chrono::minutes(1));
  clock.Advance(std::chrono::minutes(1));
  EXPECT_FALSE(Pending("ns/job"));
}

TEST_F(ExpectationsTest, ForgetAndClear) {
  e.ExpectCreate("ns/job", resources::kPods, "ns/p");
  e.Forget("ns/job", resources::kPods, "ns/p");  // the create failed
  EXPECT_FALSE(Pending("ns/job"));
  e.ExpectCreate("ns/job", resources::kPods, "ns/p");
  e.ExpectCreate("ns/job", resources::kSecrets, "ns/s");
  e.Clear("ns/job");
  EXPECT_FALSE(Pending("ns/job"));
  EXPECT_EQ(e.size(), 0u);
}

}  // namespace
}  // namespace tj::kube
