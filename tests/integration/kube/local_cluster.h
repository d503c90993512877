// A real local cluster for integration tests: hack/local-cluster.sh up in a directory of the
// test binary's own (so test binaries can run in parallel), down at the end. When the
// control-plane binaries can be neither found nor built, tests skip with the reason; with
// CI or TJ_REQUIRE_CLUSTER set in the environment they fail instead.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "kube/rest_client.h"

namespace tj::kube::testing {

class LocalCluster {
 public:
  // Starts the cluster the first time; later calls return the same one. nullptr and a
  // reason when there is none.
  static LocalCluster* Get(std::string* why_not);

  const std::string& dir() const { return dir_; }
  const std::string& kubeconfig() const { return kubeconfig_; }
  // A client for the cluster (QPS limits off).
  std::unique_ptr<RestClient> NewClient() const;

  Status RestartApiServer() const;
  Status CompactEtcd() const;
  void Down();

  // Runs a hack/local-cluster.sh subcommand for this cluster, with `env` (VAR=value ...)
  // in its environment; returns its output.
  StatusOr<std::string> Script(const std::string& subcommand, const std::string& env = "") const;

 private:
  std::string dir_, kubeconfig_;
  bool up_ = false;
};

// Skips (or fails, in CI) the current test when there is no cluster; else sets `cluster`.
#define TJ_REQUIRE_LOCAL_CLUSTER(cluster)                               \
  do {                                                                  \
    std::string tj_why_not;                                             \
    (cluster) = ::tj::kube::testing::LocalCluster::Get(&tj_why_not);    \
    if ((cluster) == nullptr) {                                         \
      if (::tj::kube::testing::ClusterRequired()) FAIL() << tj_why_not; \
      GTEST_SKIP() << tj_why_not;                                       \
    }                                                                   \
  } while (0)

bool ClusterRequired();

// "containerd" (the real node) when ctest set TJ_TEST_NODE so for this test, else "process".
std::string TestNode();

// A fresh namespace per test, so tests do not see each other's objects.
std::string NewNamespace(Client* client, const std::string& prefix);

// Polls `pred` every 50 ms until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(20));

}  // namespace tj::kube::testing
