// Two candidates for one Lease on the real API server.
#include "kube/leader_election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/integration/kube/local_cluster.h"

namespace tj::kube {
namespace {

using std::chrono::milliseconds;
using testing::Eventually;
using testing::LocalCluster;

LeaderElectionConfig Fast(const std::string& ns, const std::string& id, bool release = true) {
  LeaderElectionConfig c;
  c.lease_namespace = ns;
  c.lease_name = "tj-test-leader";
  c.identity = id;
  c.lease_duration = milliseconds(3000);  // scaled down from 15 s / 10 s / 2 s
  c.renew_deadline = milliseconds(2000);
  c.retry_period = milliseconds(250);
  c.release_on_stop = release;
  return c;
}

struct Candidate {
  std::atomic<bool> leading{false};
  std::atomic<int> started{0};
  std::unique_ptr<LeaderElector> elector;
  std::jthread thread;
  Status result;

  Candidate(Client* client, LeaderElectionConfig config) {
    elector = std::make_unique<LeaderElector>(client, RealClock::Get(), std::move(config),
                                              LeaderCallbacks{[this] {
                                                                leading = true;
                                                                ++started;
                                                              },
                                                              [this] { leading = false; },
                                                              {}});
    thread = std::jthread([this](const std::stop_token& stop) { result = elector->Run(stop); });
  }
  void Stop() {
    thread.request_stop();
    thread.join();
  }
};

TEST(KubeLeaderElection, OneLeaderAtATimeAndHandOverOnRelease) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "leader");
  Candidate a(client.get(), Fast(ns, "a"));
  ASSERT_TRUE(Eventually([&] { return a.leading.load(); }, std::chrono::seconds(10)));
  Candidate b(client.get(), Fast(ns, "b"));
  // For longer than a lease duration, b stays a follower: a keeps renewing.
  auto until = std::chrono::steady_clock::now() + milliseconds(4500);
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_FALSE(b.leading.load());
    ASSERT_TRUE(a.leading.load());
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(b.elector->ObservedHolder(), "a");
  // a stops and releases: b takes over well before the lease would have expired.
  auto t0 = std::chrono::steady_clock::now();
  a.Stop();
  EXPECT_TRUE(a.result.ok()) << a.result.message();
  ASSERT_TRUE(Eventually([&] { return b.leading.load(); }, std::chrono::seconds(10)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2000));
  auto lease = client->Get(resources::kLeases, ns, "tj-test-leader");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "b");
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
  b.Stop();
}

TEST(KubeLeaderElection, TakeOverAfterTheHolderVanishesWithoutReleasing) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "leader-crash");
  Candidate a(client.get(), Fast(ns, "a", /*release=*/false));
  ASSERT_TRUE(Eventually([&] { return a.leading.load(); }, std::chrono::seconds(10)));
  Candidate b(client.get(), Fast(ns, "b"));
  std::this_thread::sleep_for(milliseconds(500));
  auto t0 = std::chrono::steady_clock::now();
  a.Stop();  // no release: b must wait out the 3 s lease
  ASSERT_TRUE(Eventually([&] { return b.leading.load(); }, std::chrono::seconds(15)));
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, milliseconds(2000));
  EXPECT_LT(waited, milliseconds(6000));
  b.Stop();
}

}  // namespace
}  // namespace tj::kube
