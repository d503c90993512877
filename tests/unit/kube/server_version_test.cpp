// The API server's version as the operator reads it at start (GET /version), and the refusal of
// a server older than the operator needs.
#include "kube/server_version.h"

#include <gtest/gtest.h>

namespace tj::kube {
namespace {

using nlohmann::json;

ServerVersion V(int major, int minor, int patch) { return {major, minor, patch, ""}; }

TEST(ParseVersion, ReadsWhatServersSay) {
  struct Case {
    const char* text;
    ServerVersion want;
  };
  for (const Case& c :
       {Case{"v1.37.2", V(1, 37, 2)}, Case{"1.30", V(1, 30, 0)}, Case{"v1.31.0-gke.1", V(1, 31, 0)},
        Case{"v1.29.3+k3s1", V(1, 29, 3)}, Case{"v1.38.0-alpha.1", V(1, 38, 0)},
        Case{"v1.20.2", V(1, 20, 2)}, Case{"v2.0.0", V(2, 0, 0)}}) {
    auto v = ParseVersion(c.text);
    ASSERT_TRUE(v.ok()) << c.text << ": " << v.status().message();
    EXPECT_EQ(*v, c.want) << c.text;
    EXPECT_EQ(v->text, c.text);
  }
}

TEST(ParseVersion, RefusesGarbageNamingIt) {
  for (const char* text : {"", "v", "garbage", "v1", "1.", "v1.x.2", "1.37.2.4", "v1.37.2x",
                           "-1.30", "v1.99999999999999999999", "1..2", " v1.30"}) {
    auto v = ParseVersion(text);
    ASSERT_FALSE(v.ok()) << "accepted \"" << text << "\"";
    EXPECT_NE(v.status().message().find("is not a Kubernetes version"), std::string::npos)
        << v.status().message();
    EXPECT_NE(v.status().message().find(std::string("\"") + text + "\""), std::string::npos)
        << v.status().message();
  }
}

TEST(ServerVersion, OrdersByMajorMinorPatch) {
  EXPECT_LT(V(1, 29, 9), V(1, 30, 0));
  EXPECT_LT(V(1, 30, 0), V(1, 30, 1));
  EXPECT_LT(V(1, 99, 0), V(2, 0, 0));
  EXPECT_GT(V(1, 37, 2), V(1, 9, 20));  // numbers, not strings
  EXPECT_EQ(V(1, 37, 2), (ServerVersion{1, 37, 2, "v1.37.2-gke.1"}));
}

TEST(ParseVersionInfo, PrefersGitVersionThenMajorAndMinor) {
  auto full = ParseVersionInfo(json{{"major", "1"}, {"minor", "37"}, {"gitVersion", "v1.37.2"}});
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_EQ(*full, V(1, 37, 2));
  // A vendor's minor with a "+" and no usable gitVersion.
  auto plus = ParseVersionInfo(json{{"major", "1"}, {"minor", "31+"}, {"gitVersion", "weird"}});
  ASSERT_TRUE(plus.ok()) << plus.status().message();
  EXPECT_EQ(*plus, V(1, 31, 0));
  EXPECT_EQ(plus->text, "1.31");
  for (const json& bad : {json("v1.30"), json::object(), json{{"gitVersion", 130}},
                          json{{"major", "1"}}, json{{"major", "one"}, {"minor", "thirty"}}}) {
    auto v = ParseVersionInfo(bad);
    EXPECT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.status().message().find("GET /version"), std::string::npos) << v.status().message();
  }
}

TEST(CheckServerVersion, RefusesAnOlderServerSayingWhatToDo) {
  const ServerVersion min = MinimumServerVersion();
  EXPECT_EQ(min, V(1, 30, 0));
  for (const char* ok : {"v1.30.0", "v1.35.0", "v1.36.4", "v1.37.2", "v1.31.0-gke.1", "v2.0.0"}) {
    EXPECT_TRUE(CheckServerVersion(*ParseVersion(ok), min).ok()) << ok;
  }
  for (const char* old : {"v1.29.15", "v1.20.2", "v1.26.0-eks.3", "v0.99.0"}) {
    const Status s = CheckServerVersion(*ParseVersion(old), min);
    ASSERT_FALSE(s.ok()) << old;
    EXPECT_NE(s.message().find(std::string("Kubernetes ") + old), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("needs Kubernetes 1.30 or newer"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("upgrade the cluster"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace tj::kube
