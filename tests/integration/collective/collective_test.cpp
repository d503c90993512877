// Several tj-collective-test-peer processes on loopback: exact and identical all-reduce
// results (the trainer's ring, and Gloo's own all-reduce), a killed or hung peer failing the others
// within the collective timeout with the peer named, a wrong rendezvous key refused while the good
// ranks carry on, an unreachable chief timing out with the chief named.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const std::string kPeer = std::string(TJ_BIN_DIR) + "/tj-collective-test-peer";

using ::tj::testing::FreePort;
using ::tj::testing::ReadBytes;

// One child process running the peer helper, stdout and stderr captured in files.
class Peer {
 public:
  Peer(const std::string& name, const std::string& tf_config, std::vector<std::string> args) {
    out_ = dir_.Join(name + ".out");
    err_ = dir_.Join(name + ".err");
    started_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setenv("TF_CONFIG", tf_config.c_str(), 1);
      if (!std::freopen(out_.c_str(), "w", stdout) || !std::freopen(err_.c_str(), "w", stderr)) {
        ::_exit(99);
      }
      std::vector<char*> argv{const_cast<char*>(kPeer.c_str())};
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(kPeer.c_str(), argv.data());
      ::_exit(98);
    }
  }
  ~Peer() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // Waits up to `limit` for the process to exit; returns its exit code, or -1 on timeout and
  // 128+signal when a signal ended it.
  int Wait(milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!exited_) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        ended_ = Clock::now();
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (Clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return code_;
  }
  // Seconds from start to exit.
  double Seconds() const { return std::chrono::duration<double>(ended_ - started_).count(); }
  void Signal(int sig) { ::kill(pid_, sig); }

  std::string Stdout() const { return ReadBytes(out_); }
  std::string Stderr() const { return ReadBytes(err_); }
  // The events printed so far with the given name.
  std::vector<nlohmann::json> Events(const std::string& name) const {
    std::vector<nlohmann::json> events;
    std::istringstream in(Stdout());
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("event", "") == name) events.push_back(j);
    }
    return events;
  }
  // Waits until the process has printed at least n events of that name.
  bool WaitForEvents(const std::string& name, size_t n, milliseconds limit) const {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (Events(name).size() >= n) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

 private:
  tj::testing::TempDir dir_{"tj-collective"};  // removed after the process is reaped
  std::string out_, err_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
  Clock::time_point started_, ended_;
};

std::string TfConfig(const std::vector<std::string>& chief, const std::vector<std::string>& workers,
                     const std::string& type, int index) {
  nlohmann::json j;
  if (!chief.empty()) j["cluster"]["chief"] = chief;
  j["cluster"]["worker"] = workers;
  j["task"] = {{"type", type}, {"index", index}};
  j["environment"] = "cloud";
  return j.dump();
}

std::vector<std::string> Args(std::vector<std::string> extra = {}) {
  // The rendezvous requires a key; a later "--key" in `extra` overrides this one.
  std::vector<std::string> a{
      "--rendezvous-timeout-ms", "5000", "--collective-timeout-ms", "5000", "--key",
      "test-rendezvous-key"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Every peer exits 0, every all-reduce is exact, and all ranks print the same digests.
void ExpectAllAgree(std::vector<std::unique_ptr<Peer>>& peers, int iterations) {
  std::vector<std::string> reference;
  for (size_t p = 0; p < peers.size(); ++p) {
    ASSERT_EQ(peers[p]->Wait(milliseconds(20000)), 0) << "peer " << p << ": " << peers[p]->Stderr();
    auto events = peers[p]->Events("allreduce");
    ASSERT_EQ(events.size(), static_cast<size_t>(iterations));
    std::vector<std::string> digests;
    for (auto& e : events) {
      EXPECT_TRUE(e["exact"].get<bool>()) << "peer " << p << " " << e.dump();
      digests.push_back(e["noisy_sha256"]);
    }
    if (p == 0) reference = digests;
    EXPECT_EQ(digests, reference) << "peer " << p << " disagrees with peer 0";
    auto done = peers[p]->Events("done");
    ASSERT_EQ(done.size(), 1u);
    EXPECT_TRUE(done[0]["broadcast_ok"].get<bool>());
  }
  // Different iterations all-reduce different data: a digest that never changes would mean
  // the data was not reduced at all.
  ASSERT_EQ(reference.size(), static_cast<size_t>(iterations));
  if (iterations > 1) {
    EXPECT_NE(reference[0], reference[1]);
  }
}

TEST(GlooCollective, TwoWorkersAllReduceExactAndIdentical) {
  // As in the seed tutorial: localhost, no chief task, worker 0 is the chief.
  const std::vector<std::string> w{"localhost:" + std::to_string(FreePort()),
                                   "localhost:" + std::to_string(FreePort())};
  std::vector<std::unique_ptr<Peer>> peers;
  peers.reserve(2);
  for (int i = 0; i < 2; ++i) {
    peers.push_back(std::make_unique<Peer>("w" + std::to_string(i), TfConfig({}, w, "worker", i),
                                           Args({"--count", "347148"})));
  }
  ExpectAllAgree(peers, 3);
}

// Once the collective has formed, the chief's rendezvous port is closed: nothing needs it
// (a task that restarts restarts the whole gang, under a new chief), and a port left open to
// the pod network is one more to flood. Before, it stayed open for the whole run. Both
// all-reduces, the ring's and Gloo's (whose mesh reads the store too).
TEST(GlooCollective, TheChiefsRendezvousPortClosesOnceTheCollectiveFormed) {
  for (const std::string algorithm : {"ring", "gloo"}) {
    const int chief_port = FreePort();
    const std::vector<std::string> w{"127.0.0.1:" + std::to_string(chief_port),
                                     "127.0.0.1:" + std::to_string(FreePort())};
    std::vector<std::unique_ptr<Peer>> peers;
    peers.reserve(2);
    for (int i = 0; i < 2; ++i) {
      peers.push_back(std::make_unique<Peer>(
          "w" + std::to_string(i), TfConfig({}, w, "worker", i),
          Args({"--iterations", "2", "--sleep-ms", "1000", "--algorithm", algorithm})));
    }
    for (auto& p : peers) {
      ASSERT_TRUE(p->WaitForEvents("allreduce", 1, milliseconds(20000))) << p->Stderr();
    }
    // Both are still running (a second's pause after each all-reduce).
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(static_cast<uint16_t>(chief_port));
    const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to);
    const int error = errno;
    ::close(fd);
    EXPECT_NE(rc, 0) << algorithm << ": the chief's rendezvous port still takes connections";
    EXPECT_EQ(error, ECONNREFUSED) << algorithm;
    ExpectAllAgree(peers, 2);
  }
}

TEST(GlooCollective, GlooOwnAllReduceStaysAvailable) {
  // --allreduce-algorithm gloo: Gloo's all-reduce instead of the ring, same guarantees.
  const std::vector<std::string> w{"127.0.0.1:" + std::to_string(FreePort()),
                                   "127.0.0.1:" + std::to_string(FreePort()),
                                   "127.0.0.1:" + std::to_string(FreePort())};
  std::vector<std::unique_ptr<Peer>> peers;
  peers.reserve(3);
  for (int i = 0; i < 3; ++i) {
    peers.push_back(std::make_unique<Peer>("w" + std::to_string(i), TfConfig({}, w, "worker", i),
                                           Args({"--count", "100003", "--algorithm", "gloo"})));
  }
  ExpectAllAgree(peers, 3);
}

TEST(GlooCollective, ChiefAndTwoWorkersOnOwnLoopbackAddressesWithKey) {
  // Every pod of the process node has its own loopback address; the chief task is rank 0.
  const std::vector<std::string> chief{"127.0.0.1:" + std::to_string(FreePort())};
  const std::vector<std::string> w{"127.0.0.2:" + std::to_string(FreePort()),
                                   "127.0.0.3:" + std::to_string(FreePort())};
  std::vector<std::unique_ptr<Peer>> peers;
  // Workers first: they must retry until the chief listens.
  peers.reserve(2);
  for (int i = 0; i < 2; ++i) {
    peers.push_back(std::make_unique<Peer>("w" + std::to_string(i), TfConfig(chief, w, "worker", i),
                                           Args({"--key", "s3cret", "--count", "100003"})));
  }
  std::this_thread::sleep_for(milliseconds(300));
  peers.insert(peers.begin(),
               std::make_unique<Peer>("chief", TfConfig(chief, w, "chief", 0),
                                      Args({"--key", "s3cret", "--count", "100003"})));
  ExpectAllAgree(peers, 3);
}

TEST(GlooCollective, KilledPeerFailsTheOtherFastNamingIt) {
  const std::vector<std::string> w{"127.0.0.1:" + std::to_string(FreePort()),
                                   "127.0.0.1:" + std::to_string(FreePort())};
  // 20 ms between all-reduces, like a training step's compute. (A kill that lands in a narrow
  // window inside an all-reduce can go unnoticed by Gloo until the collective timeout; the
  // three-rank test below covers that bound.)
  Peer w0("w0", TfConfig({}, w, "worker", 0), Args({"--iterations", "100000", "--sleep-ms", "20"}));
  Peer w1("w1", TfConfig({}, w, "worker", 1), Args({"--iterations", "100000", "--sleep-ms", "20"}));
  ASSERT_TRUE(w0.WaitForEvents("allreduce", 5, milliseconds(10000))) << w0.Stderr();
  const auto killed = Clock::now();
  w1.Signal(SIGKILL);
  ASSERT_EQ(w0.Wait(milliseconds(10000)), 75) << w0.Stderr();
  const double after = std::chrono::duration<double>(Clock::now() - killed).count();
  // A reset connection is noticed at once, far below the 5 s collective timeout.
  EXPECT_LT(after, 2.0);
  EXPECT_NE(w0.Stderr().find("lost peer worker 1 (" + w[1] + ") (its process is gone)"),
            std::string::npos)
      << w0.Stderr();
}

TEST(GlooCollective, KilledPeerFailsEveryOtherRankOfThree) {
  const std::vector<std::string> w{"127.0.0.1:" + std::to_string(FreePort()),
                                   "127.0.0.2:" + std::to_string(FreePort()),
                                   "127.0.0.3:" + std::to_string(FreePort())};
  std::vector<std::unique_ptr<Peer>> peers;
  peers.reserve(3);
  for (int i = 0; i < 3; ++i) {
    peers.push_back(std::make_unique<Peer>("w" + std::to_string(i), TfConfig({}, w, "worker", i),
                                           Args({"--iterations", "100000", "--sleep-ms", "1"})));
  }
  ASSERT_TRUE(peers[0]->WaitForEvents("allreduce", 5, milliseconds(10000))) << peers[0]->Stderr();
  const auto killed = Clock::now();
  peers[2]->Signal(SIGKILL);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(peers[i]->Wait(milliseconds(10000)), 75) << peers[i]->Stderr();
    EXPECT_NE(peers[i]->Stderr().find("all-reduce of 1000 floats failed"), std::string::npos)
        << peers[i]->Stderr();
  }
  const double after = std::chrono::duration<double>(Clock::now() - killed).count();
  EXPECT_LT(after, 5.5);  // within the 5 s collective timeout, plus process exit and polling
  // Each survivor names the killed peer among the lost ones (the second survivor may find
  // the first one gone too by the time it probes).
  for (int i = 0; i < 2; ++i) {
    const std::string err = peers[i]->Stderr();
    const size_t lost = err.find("lost peer ");
    ASSERT_NE(lost, std::string::npos) << err;
    EXPECT_NE(err.find("worker 2 (" + w[2] + ")", lost), std::string::npos) << err;
  }
}

TEST(GlooCollective, HungPeerFailsTheOtherAtTheTimeoutNamingIt) {
  const std::vector<std::string> w{"127.0.0.1:" + std::to_string(FreePort()),
                                   "127.0.0.1:" + std::to_string(FreePort())};
  auto args = Args({"--iterations", "100000", "--sleep-ms", "1"});
  args[3] = "2000";  // --collective-timeout-ms
  Peer w0("w0", TfConfig({}, w, "worker", 0), args);
  Peer w1("w1", TfConfig({}, w, "worker", 1), args);
  ASSERT_TRUE(w0.WaitForEvents("allreduce", 5, milliseconds(10000))) << w0.Stderr();
  const auto stopped = Clock::now();
  w1.Signal(SIGSTOP);
  ASSERT_EQ(w0.Wait(milliseconds(10000)), 75) << w0.Stderr();
  const double after = std::chrono::duration<double>(Clock::now() - stopped).count();
  EXPECT_GT(after, 1.5);
  EXPECT_LT(after, 4.0);
  EXPECT_NE(w0.Stderr().find("peer worker 1 (" + w[1] + ") does not respond"), std::string::npos)
      << w0.Stderr();
  w1.Signal(SIGKILL);
}

TEST(GlooCollective, WrongKeyIsRefusedAndLoggedWhileTheGoodRanksTrainOn) {
  const std::vector<std::string> w{"127.0.0.1:" + std::to_string(FreePort()),
                                   "127.0.0.1:" + std::to_string(FreePort())};
  // A bad peer knocks before the second good rank arrives, another one during training. The
  // first is refused, retries until its rendezvous timeout (1.5 s), then gives up retryably
  // (75); the second finds the chief's port closed (it closes once the collective formed).
  std::vector<std::unique_ptr<Peer>> peers;
  peers.push_back(
      std::make_unique<Peer>("w0", TfConfig({}, w, "worker", 0),
                             Args({"--key", "right", "--iterations", "30", "--sleep-ms", "30"})));
  auto wrong = Args({"--key", "wrong"});
  wrong[1] = "1500";  // --rendezvous-timeout-ms
  Peer early("early", TfConfig({}, w, "worker", 1), wrong);
  ASSERT_EQ(early.Wait(milliseconds(10000)), 75) << early.Stderr();
  peers.push_back(
      std::make_unique<Peer>("w1", TfConfig({}, w, "worker", 1),
                             Args({"--key", "right", "--iterations", "30", "--sleep-ms", "30"})));
  ASSERT_TRUE(peers[0]->WaitForEvents("allreduce", 3, milliseconds(10000)));
  Peer late("late", TfConfig({}, w, "worker", 1), wrong);
  Peer keyless("keyless", TfConfig({}, w, "worker", 1), Args({"--key", ""}));
  ASSERT_EQ(late.Wait(milliseconds(10000)), 75) << late.Stderr();
  ASSERT_EQ(keyless.Wait(milliseconds(10000)), 75) << keyless.Stderr();
  const std::string refused =
      "rendezvous with chief " + w[0] + " (worker 0) refused: wrong TJ_RENDEZVOUS_KEY";
  EXPECT_NE(early.Stderr().find(refused), std::string::npos) << early.Stderr();
  EXPECT_NE(late.Stderr().find("failed: could not reach it"), std::string::npos) << late.Stderr();
  // No key at all: refused before connecting (no fail-open).
  EXPECT_NE(keyless.Stderr().find("TJ_RENDEZVOUS_KEY is empty, but this collective has 2 members"),
            std::string::npos)
      << keyless.Stderr();
  // The good ranks finish all their all-reduces in agreement.
  ExpectAllAgree(peers, 30);
  // The chief logged the refusals on stderr (rate-limited: at most 20 lines a minute).
  const std::string chief_err = peers[0]->Stderr();
  size_t refusals = 0;
  for (size_t at = chief_err.find("refused: "); at != std::string::npos;
       at = chief_err.find("refused: ", at + 1)) {
    ++refusals;
  }
  EXPECT_GE(refusals, 1u) << chief_err;
  EXPECT_LE(refusals, 20u) << chief_err;
  EXPECT_NE(chief_err.find("warning: rendezvous server: connection from 127.0.0.1:"),
            std::string::npos)
      << chief_err;
  EXPECT_NE(chief_err.find("(\"worker 1\"): refused: wrong TJ_RENDEZVOUS_KEY"), std::string::npos)
      << chief_err;
}

TEST(GlooCollective, UnreachableChiefTimesOutNamingIt) {
  const std::vector<std::string> w{"127.0.0.1:" + std::to_string(FreePort()),
                                   "127.0.0.1:" + std::to_string(FreePort())};
  auto args = Args();
  args[1] = "1500";  // --rendezvous-timeout-ms
  Peer w1("w1", TfConfig({}, w, "worker", 1), args);
  ASSERT_EQ(w1.Wait(milliseconds(10000)), 75) << w1.Stderr();
  EXPECT_GT(w1.Seconds(), 1.4);
  EXPECT_LT(w1.Seconds(), 4.0);
  EXPECT_NE(w1.Stderr().find("rendezvous with chief " + w[0] +
                             " (worker 0) failed: could not reach it within 1.5 s"),
            std::string::npos)
      << w1.Stderr();
}

TEST(GlooCollective, MissingPeerAtRendezvousIsNamed) {
  const std::vector<std::string> w{"127.0.0.1:" + std::to_string(FreePort()),
                                   "127.0.0.1:" + std::to_string(FreePort())};
  auto args = Args();
  args[1] = "1500";  // --rendezvous-timeout-ms
  Peer w0("w0", TfConfig({}, w, "worker", 0), args);
  ASSERT_EQ(w0.Wait(milliseconds(10000)), 75) << w0.Stderr();
  EXPECT_LT(w0.Seconds(), 4.0);
  EXPECT_NE(w0.Stderr().find("peer worker 1 (" + w[1] + ") did not arrive at the rendezvous"),
            std::string::npos)
      << w0.Stderr();
}

}  // namespace
