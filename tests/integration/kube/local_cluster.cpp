#include "tests/integration/kube/local_cluster.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace tj::kube::testing {
namespace {

StatusOr<std::string> RunCommand(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return Status::Error("cannot run: " + cmd);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int rc = pclose(p);
  if (rc != 0) {
    return Status::Error("`" + cmd + "` failed (status " + std::to_string(rc) + "):\n" + out);
  }
  return out;
}

// Owns the one cluster of this test binary and stops it when the tests end.
class ClusterEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    if (cluster_) cluster_->Down();
  }
  LocalCluster* cluster_ = nullptr;
};

ClusterEnvironment* Env() {
  static ClusterEnvironment* env = [] {
    auto* e = new ClusterEnvironment;
    ::testing::AddGlobalTestEnvironment(e);  // gtest owns it
    return e;
  }();
  return env;
}
// Registered before main() runs the tests, so TearDown happens.
[[maybe_unused]] const auto* const kRegistered = Env();

}  // namespace

// The node the tests' clusters run (local_cluster.h): the process node unless TJ_TEST_NODE says
// otherwise (ctest sets TJ_TEST_NODE=containerd for the suites that run on the real node, one at a
// time). Not TJ_NODE: a developer's choice for the demo must not put every test on the one real
// node.
std::string TestNode() {
  const char* node = std::getenv("TJ_TEST_NODE");
  return node != nullptr && *node != '\0' ? node : "process";
}

bool ClusterRequired() {
  const char* ci = std::getenv("CI");
  const char* req = std::getenv("TJ_REQUIRE_CLUSTER");
  return (ci != nullptr && *ci != '\0' && std::string(ci) != "false") ||
         (req != nullptr && std::string(req) == "1");
}

StatusOr<std::string> LocalCluster::Script(const std::string& subcommand,
                                           const std::string& env) const {
  return RunCommand(env + " TJ_NODE='" + TestNode() + "' TJ_LOCAL_CLUSTER_DIR='" + dir_ +
                    "' TJ_BUILD_DIR='" + std::string(TJ_BIN_DIR) + "/..' '" +
                    std::string(TJ_SOURCE_DIR) + "/hack/local-cluster.sh' " + subcommand);
}

LocalCluster* LocalCluster::Get(std::string* why_not) {
  static std::mutex mu;
  static std::unique_ptr<LocalCluster> cluster;
  static std::string failure;
  std::lock_guard<std::mutex> lock(mu);
  if (cluster) return cluster.get();
  if (!failure.empty()) {
    *why_not = failure;
    return nullptr;
  }
  auto c = std::make_unique<LocalCluster>();
  c->dir_ = std::string(TJ_BIN_DIR) + "/../local-cluster-" +
            ::testing::UnitTest::GetInstance()->current_test_suite()->name() + "-" +
            std::to_string(::getpid());
  // Finding or building the binaries, and a real node's need of root, are the only steps
  // allowed to skip.
  if (TestNode() == "containerd" && ::geteuid() != 0) {
    failure = "no local cluster: TJ_TEST_NODE=containerd (a real node) needs root";
    *why_not = failure;
    return nullptr;
  }
  auto built = c->Script("build");
  if (!built.ok()) {
    failure =
        "no local cluster: the control-plane binaries could not be found or built "
        "(set KUBEBUILDER_ASSETS or run hack/install-deps.sh): " +
        built.status().message();
    *why_not = failure;
    return nullptr;
  }
  // Down with this process, also when a timeout kills it before TearDown.
  auto up = c->Script("up", "TJ_LOCAL_CLUSTER_OWNER_PID=" + std::to_string(::getpid()));
  if (!up.ok()) {
    // Binaries exist but the cluster does not start: a real failure, never a skip.
    ADD_FAILURE() << "hack/local-cluster.sh up failed: " << up.status().message();
    c->Script("down").status().ok();
    failure = "the local cluster did not start (see the failure above)";
    *why_not = failure;
    return nullptr;
  }
  c->kubeconfig_ = c->dir_ + "/kubeconfig";
  c->up_ = true;
  cluster = std::move(c);
  Env()->cluster_ = cluster.get();
  return cluster.get();
}

std::unique_ptr<RestClient> LocalCluster::NewClient() const {
  auto cfg = LoadKubeconfigFile(kubeconfig_);
  EXPECT_TRUE(cfg.ok()) << cfg.status().message();
  cfg->qps = 0;
  auto c = RestClient::New(*cfg, RealClock::Get());
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(c).value();
}

Status LocalCluster::RestartApiServer() const { return Script("restart-apiserver").status(); }
Status LocalCluster::CompactEtcd() const { return Script("compact").status(); }

void LocalCluster::Down() {
  if (!up_) return;
  auto r = Script("down");
  if (!r.ok()) ADD_FAILURE() << r.status().message();
  up_ = false;
  // Keep the logs of a failed run, or when asked to (TJ_KEEP_CLUSTER_DIR=1).
  const char* keep = std::getenv("TJ_KEEP_CLUSTER_DIR");
  bool failed = ::testing::UnitTest::GetInstance()->failed_test_count() > 0;
  if (r.ok() && !failed && (keep == nullptr || std::string(keep) != "1")) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string NewNamespace(Client* client, const std::string& prefix) {
  static std::atomic<int> n{0};
  std::string name = prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  auto r =
      client->Create(resources::kNamespaces, "",
                     {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return name;
}

bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

}  // namespace tj::kube::testing
