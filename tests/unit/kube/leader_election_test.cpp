// The leader's renew deadline against an API server that stops answering: a Lease "server" in
// memory (FakeClient) whose calls can be made to hang, as those of a paused kube-apiserver do. The
// real API server paused with SIGSTOP: tests/integration/kube/restart_test.cpp.
#include "kube/leader_election.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/support/fake_client.h"
#include "tests/support/leader_term.h"

namespace tj::kube {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;
using tj::testing::FakeClient;

TEST(LeaderElection, StopsLeadingAtTheRenewDeadlineWhileARenewalHangs) {
  FakeClient client;  // one Lease, kept; its calls hang while stalled
  client.keep_writes = true;
  LeaderElectionConfig c;
  c.lease_namespace = "ns";
  c.lease_name = "lease";
  c.identity = "a";
  c.lease_duration = milliseconds(1500);
  c.renew_deadline = milliseconds(1000);
  c.retry_period = milliseconds(200);
  tj::testing::LeaderTerm term;
  LeaderElector elector(&client, RealClock::Get(), c, term.Callbacks());
  Status result;
  std::jthread run([&](const std::stop_token& stop) { result = elector.Run(stop); });
  struct Unstall {  // before `run` joins, also when an assertion ends the test early
    FakeClient* client;
    ~Unstall() { client->Stall(false); }
  } unstall{&client};
  for (int i = 0; i < 200 && !term.leading(); ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_TRUE(term.leading());
  std::this_thread::sleep_for(milliseconds(500));  // renewals go through

  client.Stall(true);
  const auto stalled_at = Steady::now();
  for (int i = 0; i < 300 && term.leading(); ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_FALSE(term.leading()) << "still leading 3 s after the API server stopped answering";
  const milliseconds took = term.StoppedAfter(stalled_at);
  // The last renewal began at most one retry period before the stall: the term ends between
  // renewDeadline - retryPeriod and renewDeadline after it (plus the watchdog's tick).
  EXPECT_LE(took, c.renew_deadline + milliseconds(150)) << took.count() << " ms";
  EXPECT_GE(took, c.renew_deadline - c.retry_period - milliseconds(50)) << took.count() << " ms";
  EXPECT_TRUE(elector.IsLeader() == false);
  EXPECT_GE(client.calls_while_stalled(), 1);  // a renewal was in flight all along

  client.Stall(false);  // the call in flight returns; Run() sees the term has ended
  run.join();
  EXPECT_FALSE(result.ok());
  EXPECT_NE(result.message().find("renew deadline"), std::string::npos) << result.message();
}

TEST(LeaderElection, LeaseClientHasNoRateLimitNoRetriesAndAShortTimeout) {
  RestConfig base;
  base.qps = 5;
  base.max_retries = 5;
  base.timeout = std::chrono::seconds(30);
  LeaderElectionConfig c;
  const RestConfig lease = LeaseClientConfig(base, c);  // 15 s / 10 s / 2 s
  EXPECT_LE(lease.qps, 0);
  EXPECT_EQ(lease.max_retries, 0);
  EXPECT_EQ(lease.timeout, std::chrono::seconds(2));
  c.retry_period = milliseconds(250);
  EXPECT_EQ(LeaseClientConfig(base, c).timeout, std::chrono::seconds(1));  // at least 1 s
  EXPECT_EQ(LeaseClientConfig(base, c).server, base.server);
}

}  // namespace
}  // namespace tj::kube
