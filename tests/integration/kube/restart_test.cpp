// An informer that lives through an API server restart, and one whose version was compacted
// away in etcd meanwhile (410 Gone -> relist); a leader whose API server is paused.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "kube/informer.h"
#include "kube/leader_election.h"
#include "tests/integration/kube/local_cluster.h"
#include "tests/support/leader_term.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::Eventually;
using testing::LocalCluster;

// Labelled, so the informers below see only the test's own objects: the controller manager
// publishes kube-root-ca.crt into every new namespace.
constexpr char kSelector[] = "tj-test=restart";
json ConfigMap(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", {{"tj-test", "restart"}}}}}};
}

TEST(KubeRestart, InformerSurvivesApiServerRestartAndRelistsAfterCompaction) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "restart");
  const auto& cm = resources::kConfigMaps;
  ASSERT_TRUE(client->Create(cm, ns, ConfigMap("before")).ok());
  InformerOptions o;
  o.resource = cm;
  o.ns = ns;
  o.label_selector = kSelector;
  o.min_backoff = std::chrono::milliseconds(200);
  o.max_backoff = std::chrono::milliseconds(1000);
  Informer informer(client.get(), RealClock::Get(), o);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(20)));
  ASSERT_EQ(informer.cache().size(), 1u);

  // 1. Restart: the watch breaks, the informer reconnects and keeps converging.
  int watches_before = informer.watches();
  ASSERT_TRUE(cluster->RestartApiServer().ok());
  ASSERT_TRUE(client->Create(cm, ns, ConfigMap("after-restart")).ok());
  EXPECT_TRUE(Eventually([&] { return informer.cache().Get(ns + "/after-restart").has_value(); },
                         std::chrono::seconds(30)));
  EXPECT_GT(informer.watches(), watches_before);

  // 2. Writes elsewhere move etcd's revision past the informer's version; compaction removes
  // the history and a restart empties the API server's watch cache: the informer's version is
  // gone (410) and only a relist can recover.
  int lists_before = informer.lists();
  std::string other = testing::NewNamespace(client.get(), "elsewhere");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client
                    ->Create(resources::kSecrets, other,
                             {{"apiVersion", "v1"},
                              {"kind", "Secret"},
                              {"metadata", {{"name", "s" + std::to_string(i)}}}})
                    .ok());
  }
  ASSERT_TRUE(cluster->CompactEtcd().ok());
  ASSERT_TRUE(cluster->RestartApiServer().ok());
  ASSERT_TRUE(client->Create(cm, ns, ConfigMap("after-compaction")).ok());
  EXPECT_TRUE(Eventually([&] { return informer.cache().Get(ns + "/after-compaction").has_value(); },
                         std::chrono::seconds(30)));
  EXPECT_GT(informer.lists(), lists_before);
  EXPECT_EQ(informer.cache().size(), 3u);
  informer.Stop();
}

// After the restarts above, the API server's watch cache starts at a recent version: a watch
// from version 1 is answered 410 (an ERROR event in the stream, or the HTTP status), and an
// informer resuming from it lists again.
TEST(KubeRestart, TooOldVersionIsGoneAndTheInformerRelists) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  ASSERT_TRUE(cluster->RestartApiServer().ok());  // in case this test runs alone
  std::string ns = testing::NewNamespace(client.get(), "gone");
  ASSERT_TRUE(client->Create(resources::kConfigMaps, ns, ConfigMap("x")).ok());
  WatchOptions old;
  old.resource_version = "1";
  std::vector<WatchEvent> events;
  auto r = client->Watch(resources::kConfigMaps, "", old, [&](const WatchEvent& ev) {
    events.push_back(ev);
    return ev.type != WatchEvent::Type::kError;
  });
  bool gone_event = !events.empty() && events.back().type == WatchEvent::Type::kError &&
                    IsGone(events.back().AsError());
  bool gone_status = !r.ok() && IsGone(r.error());
  EXPECT_TRUE(gone_event || gone_status) << (r.ok() ? "" : r.error().ToString());

  InformerOptions o;
  o.resource = resources::kConfigMaps;
  o.ns = ns;
  o.label_selector = kSelector;
  o.initial_resource_version = "1";  // as if resuming from long ago
  Informer informer(client.get(), RealClock::Get(), o);
  informer.Start();
  EXPECT_TRUE(Eventually([&] { return informer.lists() >= 1 && informer.cache().size() == 1; }));
  EXPECT_TRUE(informer.cache().Get(ns + "/x").has_value());
}

// A leader whose API server stops answering (SIGSTOP: connections stay open, nothing is
// refused, every call hangs) stops leading within renewDeadline of its last renewal, while
// its renewal is still waiting for an answer; Run() returns once that call times out.
TEST(KubeRestart, ALeaderStopsWithinItsRenewDeadlineWhileTheApiServerIsPaused) {
  using std::chrono::milliseconds;
  using Steady = std::chrono::steady_clock;
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "paused");
  LeaderElectionConfig lc;
  lc.lease_namespace = ns;
  lc.lease_name = "tj-test-paused";
  lc.identity = "a";
  lc.lease_duration = milliseconds(3000);  // scaled down from 15 s / 10 s / 2 s
  lc.renew_deadline = milliseconds(2000);
  lc.retry_period = milliseconds(500);
  auto cfg = LoadKubeconfigFile(cluster->kubeconfig());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto lease_client = RestClient::New(LeaseClientConfig(*cfg, lc), RealClock::Get());
  ASSERT_TRUE(lease_client.ok()) << lease_client.status().message();

  tj::testing::LeaderTerm term;
  LeaderElector elector(lease_client->get(), RealClock::Get(), lc, term.Callbacks());
  Status result;
  std::jthread run([&](const std::stop_token& stop) { result = elector.Run(stop); });
  ASSERT_TRUE(Eventually([&] { return term.leading(); }, std::chrono::seconds(10)));
  std::this_thread::sleep_for(milliseconds(1200));  // a few renewals
  ASSERT_TRUE(term.leading());

  int pid = 0;
  std::ifstream(cluster->dir() + "/pids/kube-apiserver") >> pid;
  ASSERT_GT(pid, 0) << "no pid file of kube-apiserver in " << cluster->dir();
  struct Resume {
    int pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{pid};
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  const auto paused_at = Steady::now();
  ASSERT_TRUE(Eventually([&] { return !term.leading(); }, std::chrono::seconds(10)));
  const auto stopped = term.stopped_at();
  const milliseconds took = term.StoppedAfter(paused_at);
  // The last renewal began at most one retry period (plus its own answer) before the pause.
  EXPECT_LT(took, lc.renew_deadline + milliseconds(300)) << took.count() << " ms";
  EXPECT_GT(took, lc.renew_deadline - lc.retry_period - milliseconds(500)) << took.count();
  run.join();  // the call in flight times out after the lease client's 1 s
  const auto joined = std::chrono::duration_cast<milliseconds>(Steady::now() - stopped);
  EXPECT_LT(joined, milliseconds(2500)) << joined.count() << " ms";
  EXPECT_FALSE(result.ok());
  EXPECT_NE(result.message().find("renew deadline"), std::string::npos) << result.message();
  std::cerr << "paused API server: stopped leading " << took.count() << " ms after the pause, "
            << "Run() returned " << joined.count() << " ms later\n";

  ::kill(pid, SIGCONT);
  EXPECT_TRUE(Eventually([&] { return client->Get(resources::kLeases, ns, lc.lease_name).ok(); },
                         std::chrono::seconds(30)));
}

}  // namespace
}  // namespace tj::kube
