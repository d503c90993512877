// Name resolution of the trainer's sockets: a pod's own DNS name appears a few seconds after the
// pod starts, so resolving it waits until a deadline rather than failing at once.
#include "trainer/cluster/net/socket.h"

#include <gtest/gtest.h>

#include <chrono>

namespace tj::cluster {
namespace {

using std::chrono::milliseconds;

TEST(ResolveHostBefore, ANameThatResolvesAnswersAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> ip = ResolveHostBefore("localhost", DeadlineIn(milliseconds(5000)));
  ASSERT_TRUE(ip.ok()) << ip.status().message();
  EXPECT_TRUE(*ip == "127.0.0.1" || *ip == "::1") << *ip;
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
}

TEST(ResolveHostBefore, ANameThatNeverResolvesFailsAtTheDeadlineNamingIt) {
  // .invalid never resolves (RFC 6761).
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> ip =
      ResolveHostBefore("tj-worker-0.tj.nowhere.invalid", DeadlineIn(milliseconds(700)));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(ip.ok());
  EXPECT_NE(ip.status().message().find("tj-worker-0.tj.nowhere.invalid"), std::string::npos)
      << ip.status().message();
  EXPECT_NE(ip.status().message().find("retries"), std::string::npos) << ip.status().message();
  EXPECT_GE(took, milliseconds(300));  // it tried again, not once
  EXPECT_LT(took, milliseconds(3000));
}

TEST(ResolveOwnHostBefore, AcceptsOnlyAnAddressOfThisHost) {
  EXPECT_TRUE(IsLocalAddress("127.0.0.1"));
  EXPECT_FALSE(IsLocalAddress("198.51.100.7"));  // TEST-NET-2: documentation only
  EXPECT_FALSE(IsLocalAddress("not-an-address"));
  StatusOr<std::string> ip = ResolveOwnHostBefore("localhost", DeadlineIn(milliseconds(3000)));
  ASSERT_TRUE(ip.ok()) << ip.status().message();
  // A name whose address is another host's (a stale record) is tried again, then refused.
  StatusOr<std::string> stale = ResolveOwnHostBefore("198.51.100.7", DeadlineIn(milliseconds(600)));
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find("not an address of this host"), std::string::npos)
      << stale.status().message();
}

}  // namespace
}  // namespace tj::cluster
