// The trainers' /status polls off the reconcile workers, against real sockets: chiefs that
// accept a connection and never answer (as behind a default-deny NetworkPolicy that drops, or
// a program that stays silent) and one trainer that answers, all read with the operator's own
// ReadTrainerStatus (1.5 s timeout). Asking costs a pass nothing; the polls are bounded in
// number; an answer requeues its job; the pass sees it next time.
#include "operator/controller/trainer_status_poller.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/http_server.h"
#include "operator/controller/executor.h"
#include "operator/controller/tenant_reads.h"
#include "tests/support/subprocess.h"

namespace tj::controller {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

// A port on 127.0.0.1 whose connections the kernel accepts (the listen backlog) and nobody
// ever reads or answers.
class SilentChief {
 public:
  SilentChief() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
    }
    port_ = ntohs(addr.sin_port);
  }
  ~SilentChief() { ::close(fd_); }
  SilentChief(const SilentChief&) = delete;
  SilentChief& operator=(const SilentChief&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

PodView RunningPod(const std::string& name, int port) {
  PodView p;
  p.name = name;
  p.phase = "Running";
  p.pod_ip = "127.0.0.1";
  p.status_port = port;
  return p;
}

TEST(TrainerStatusPoller, SilentChiefsCostAPassNothingAndAnAnswerRequeuesItsJob) {
  std::vector<std::unique_ptr<SilentChief>> silent;
  silent.reserve(12);
  for (int i = 0; i < 12; ++i) silent.push_back(std::make_unique<SilentChief>());
  const int port = ::tj::testing::FreePort();
  HttpServer trainer(
      "127.0.0.1", port,
      {{"/status", [] {
          return HttpAnswer{200, "application/json", R"({"state":"training","epoch":3})"};
        }}});
  ASSERT_TRUE(trainer.Start().ok());

  std::mutex mu;
  std::set<std::string> requeued;
  std::atomic<int> fetches{0};
  TrainerStatusPoller poller(
      [&](const PodView& pod) {
        ++fetches;
        return ReadTrainerStatus(pod);
      },
      [&](const std::string& key) {
        std::lock_guard<std::mutex> lock(mu);
        requeued.insert(key);
      },
      /*max_in_flight=*/4, /*period=*/0ms);

  // A pass of each of 12 jobs whose chief is silent, then of the one that answers: together
  // well under one poll's timeout (asked inside the passes, before: 12 x 1.5 s).
  const auto start = Steady::now();
  for (int i = 0; i < 12; ++i) {
    EXPECT_FALSE(poller.Latest("ns/silent-" + std::to_string(i),
                               RunningPod("silent-" + std::to_string(i) + "-chief-0",
                                          silent[static_cast<size_t>(i)]->port())));
  }
  EXPECT_FALSE(poller.Latest("ns/good", RunningPod("good-chief-0", port)));
  EXPECT_LT(Steady::now() - start, 200ms);
  EXPECT_LE(poller.in_flight(), 4) << "polls beyond the bound";

  // The silent ones time out (1.5 s each, 4 at a time); the good job is asked in a later pass
  // and, once its answer is in, requeued; its next pass sees the answer.
  std::optional<nlohmann::json> answer;
  for (auto deadline = Steady::now() + 10s; Steady::now() < deadline && !answer;) {
    std::this_thread::sleep_for(100ms);
    EXPECT_LE(poller.in_flight(), 4);
    answer = poller.Latest("ns/good", RunningPod("good-chief-0", port));
  }
  ASSERT_TRUE(answer.has_value()) << "the answering trainer was never read";
  EXPECT_EQ(answer->value("epoch", 0), 3);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(requeued, std::set<std::string>{"ns/good"});
  }
  // No poll of a pod twice at once: every silent chief is asked one poll at a time.
  EXPECT_LE(fetches.load(), 13 + 10);
}

TEST(TrainerStatusPoller, TheDestructorWaitsForThePollsInFlight) {
  SilentChief silent;
  std::atomic<bool> fetched{false};
  const auto start = Steady::now();
  {
    TrainerStatusPoller poller(
        [&](const PodView& pod) {
          auto s = ReadTrainerStatus(pod);
          fetched = true;
          return s;
        },
        nullptr, 2, 0ms);
    EXPECT_FALSE(poller.Latest("ns/a", RunningPod("a-chief-0", silent.port())));
  }
  EXPECT_TRUE(fetched) << "destroyed while a poll still ran";
  EXPECT_GE(Steady::now() - start, 1s);  // the poll's own timeout bounds the wait
  EXPECT_LT(Steady::now() - start, 5s);
}

// Whatever the trainer answers and however often passes ask, a pod is polled once a period;
// of its answer only what the reconciler copies is kept, and only a change of that requeues.
TEST(TrainerStatusPoller, APodIsPolledOncePerPeriodAndOnlyTheCopiedFieldsAreKept) {
  FakeClock clock;
  std::atomic<int> fetches{0};
  std::atomic<int> requeues{0};
  TrainerStatusPoller poller(
      [&](const PodView&) -> std::optional<nlohmann::json> {
        const int n = ++fetches;
        // The step advances on every other answer; the padding always changes.
        return nlohmann::json{{"epoch", 1},
                              {"step", n / 2},
                              {"state", "training"},
                              {"last_backup", {{"epoch", 1}, {"step", 4}, {"x", "y"}}},
                              {"padding", std::string(static_cast<size_t>(n % 2 + 1000), 'x')}};
      },
      [&](const std::string&) { ++requeues; }, 4, 5s, &clock);
  const PodView pod = RunningPod("a-chief-0", 1);
  auto settle = [&] {
    for (auto until = Steady::now() + 5s; poller.in_flight() > 0 && Steady::now() < until;) {
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_EQ(poller.in_flight(), 0);
  };
  for (int period = 0; period < 10; ++period) {
    for (int pass = 0; pass < 50; ++pass) {  // 50 passes a period ask
      poller.Latest("ns/a", pod);
      settle();
      clock.Advance(100ms);
    }
  }
  EXPECT_EQ(fetches.load(), 10);  // one poll a period: 10 periods of 5 s
  // The padding changed every time, the copied step every other time.
  EXPECT_EQ(requeues.load(), 6);
  const std::optional<nlohmann::json> kept = poller.Latest("ns/a", pod);
  ASSERT_TRUE(kept);
  EXPECT_EQ(*kept, (nlohmann::json{
                       {"epoch", 1}, {"step", 5}, {"last_backup", {{"epoch", 1}, {"step", 4}}}}));
}

}  // namespace
}  // namespace tj::controller
