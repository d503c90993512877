// The leader's renew deadline against an API server that stops answering: a Lease "server" in
// memory whose calls can be made to hang, as those of a paused kube-apiserver do. The real
// API server paused with SIGSTOP: tests/integration/kube/restart_test.cpp.
#include "kube/leader_election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/support/leader_term.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

// One Lease; every call waits while `Stall(true)` holds (until `Stall(false)`).
class StallingLeaseClient : public Client {
 public:
  void Stall(bool on) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stalled_ = on;
    }
    cv_.notify_all();
  }
  int calls_while_stalled() const { return calls_while_stalled_.load(); }

  Result<json> Get(const Resource&, const std::string&, const std::string&) override {
    std::unique_lock<std::mutex> lock(mu_);
    WaitWhileStalled(lock);
    if (lease_.is_null()) return ApiError{404, "NotFound", "lease not found", "GET", 0};
    return lease_;
  }
  Result<json> Create(const Resource&, const std::string&, const json& object) override {
    std::unique_lock<std::mutex> lock(mu_);
    WaitWhileStalled(lock);
    lease_ = object;
    lease_["metadata"]["resourceVersion"] = "1";
    return lease_;
  }
  Result<json> Update(const Resource&, const std::string&, const json& object) override {
    std::unique_lock<std::mutex> lock(mu_);
    WaitWhileStalled(lock);
    lease_ = object;
    lease_["metadata"]["resourceVersion"] =
        std::to_string(std::stoi(lease_["metadata"].value("resourceVersion", "1")) + 1);
    return lease_;
  }
  Result<json> List(const Resource&, const std::string&, const ListOptions&) override {
    return json::object();
  }
  Result<json> UpdateStatus(const Resource&, const std::string&, const json& o) override {
    return o;
  }
  Result<json> Patch(const Resource&, const std::string&, const std::string&, PatchType,
                     const json& patch, const PatchOptions&) override {
    return patch;
  }
  Result<json> Delete(const Resource&, const std::string&, const std::string&,
                      const DeleteOptions&) override {
    return json::object();
  }
  Result<WatchSummary> Watch(const Resource&, const std::string&, const WatchOptions&,
                             const std::function<bool(WatchEvent&)>&, std::stop_token) override {
    return WatchSummary{};
  }
  Result<json> Raw(const std::string&, const std::string&, const std::optional<json>&) override {
    return json::object();
  }

 private:
  void WaitWhileStalled(std::unique_lock<std::mutex>& lock) {
    if (stalled_) ++calls_while_stalled_;
    cv_.wait(lock, [this] { return !stalled_; });
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stalled_ = false;  // GUARDED_BY(mu_)
  json lease_;            // GUARDED_BY(mu_)
  std::atomic<int> calls_while_stalled_{0};
};

TEST(LeaderElection, StopsLeadingAtTheRenewDeadlineWhileARenewalHangs) {
  StallingLeaseClient client;
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
    StallingLeaseClient* client;
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
