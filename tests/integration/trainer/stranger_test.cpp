// A stranger on the network of a forming gang: three real tj-trainer processes on loopback
// form their collective while another thread, without the job's key, finds every TCP port
// each of them listens on (from /proc, as it appears) and keeps connecting to it: connections
// that say nothing and stay open, garbage, well-formed hellos with a wrong key (claiming to be
// the rank the port waits for), connect-and-close and connect-and-reset. The job must train to
// the end with the same weights as an undisturbed run, every time (three rounds), and the
// stranger must have reached the ring ports while the gang was forming.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "tests/integration/trainer/trainer_harness.h"
#include "trainer/cluster/net/socket.h"
#include "trainer/cluster/wire/link_protocol.h"

namespace tj::testing {
namespace {

using namespace std::chrono_literals;

// The TCP ports process `pid` listens on: its socket inodes matched against /proc/net/tcp*.
std::set<int> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& e : std::filesystem::directory_iterator(fd_dir, ec)) {
    std::error_code link_ec;
    const std::string target = std::filesystem::read_symlink(e.path(), link_ec).string();
    if (!link_ec && target.rfind("socket:[", 0) == 0) {
      inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  std::set<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      fields >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
          inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: LISTEN
      ports.insert(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

// What the stranger did, for the assertions.
struct StrangerCounts {
  std::atomic<int> connections{0};
  std::atomic<int> ring_hellos{0};    // ring ports reached (a TJCH ring server hello seen)
  std::atomic<int> health_hellos{0};  // peer-health ports reached
  std::atomic<int> rendezvous_hellos{0};
};

void PutBE(std::string& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// One connection of the stranger to `port`, in `mode`; silent ones go to `held`.
void Knock(int port, int mode, std::deque<cluster::Socket>& held, StrangerCounts& counts) {
  auto s = cluster::ConnectTcp("127.0.0.1", port, cluster::DeadlineIn(200ms));
  if (!s.ok()) return;
  ++counts.connections;
  const auto deadline = cluster::DeadlineIn(100ms);
  switch (mode) {
    case 0:  // silent, kept open
      held.push_back(std::move(s).value());
      if (held.size() > 120) held.pop_front();
      return;
    case 1: {  // garbage
      std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
      junk += std::string(1, '\0') + "\xff garbage";
      (void)s->WriteAll(junk.data(), junk.size(), deadline);
      held.push_back(std::move(s).value());
      if (held.size() > 120) held.pop_front();
      return;
    }
    case 2: {  // the protocol the port speaks, with a wrong key
      char hello[64];
      const ssize_t n = ::recv(s->fd(), hello, sizeof hello, 0);
      (void)s->WaitReadable(deadline);
      const ssize_t m = n > 0 ? n : ::recv(s->fd(), hello, sizeof hello, 0);
      if (m >= static_cast<ssize_t>(cluster::kLinkServerHelloBytes) &&
          std::string(hello, 4) == "TJCH") {
        const auto channel = static_cast<cluster::Channel>(hello[5]);
        (channel == cluster::Channel::kRing ? counts.ring_hellos : counts.health_hellos)++;
        cluster::LinkTranscript t;
        t.channel = channel;
        t.gang = 2;
        const uint32_t server_rank =
            (static_cast<uint32_t>(static_cast<unsigned char>(hello[6])) << 24) |
            (static_cast<unsigned char>(hello[7]) << 16) |
            (static_cast<unsigned char>(hello[8]) << 8) | static_cast<unsigned char>(hello[9]);
        t.to_rank = server_rank;
        t.from_rank = (server_rank + 2) % 3;  // the rank a ring port waits for
        std::copy(hello + 10, hello + 42, t.server_nonce.begin());
        auto forged = cluster::LinkClientHello("not-the-job-key", t);
        if (forged.ok()) (void)s->WriteAll(forged->data(), forged->size(), deadline);
      } else if (m >= 37 && std::string(hello, 4) == "TJRV") {
        ++counts.rendezvous_hellos;
        std::string forged("TJRV\x03", 5);
        PutBE(forged, 8, 4);
        forged += "worker 1";
        PutBE(forged, 2, 8);
        forged.append(64, '\x5a');  // a nonce and a proof made without the key
        (void)s->WriteAll(forged.data(), forged.size(), deadline);
      }
      held.push_back(std::move(s).value());
      if (held.size() > 120) held.pop_front();
      return;
    }
    case 3:  // connect and close
      return;
    default: {  // connect and reset
      linger l{1, 0};
      ::setsockopt(s->fd(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
      return;
    }
  }
}

// Until `stop`: every port the processes listen on, knocked at in every mode, round after
// round (a port is rescanned every few milliseconds, so short-lived ones are found too).
void Stranger(const std::vector<pid_t>& pids, const std::atomic<bool>& stop,
              StrangerCounts& counts) {
  std::map<int, std::deque<cluster::Socket>> held;
  int mode = 0;
  while (!stop) {
    for (pid_t pid : pids) {
      for (int port : ListeningPorts(pid)) {
        for (int k = 0; k < 5; ++k) Knock(port, (mode + k) % 5, held[port], counts);
      }
    }
    mode = (mode + 1) % 5;
    std::this_thread::sleep_for(2ms);
  }
}

TEST(StrangerTest, AStrangerAtEveryPortOfAFormingGangCannotStopIt) {
  TJ_REQUIRE_DATASET();
  // Room for the stranger's held connections (the trainers inherit it too).
  rlimit nofile{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &nofile), 0);
  nofile.rlim_cur = std::min<rlim_t>(nofile.rlim_max, 8192);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &nofile), 0);
  TempDir dir;
  const std::vector<std::string> flags = {"--epochs",
                                          "1",
                                          "--steps-per-epoch",
                                          "20",
                                          "--threads",
                                          "1",
                                          "--rendezvous-timeout",
                                          "60",
                                          "--collective-timeout",
                                          "30"};
  const std::map<std::string, std::string> env = {{"TJ_RESTART_COUNT", "2"}};
  // The weights of an undisturbed run.
  std::string reference;
  {
    LoopbackTfCluster c = LoopbackTfCluster::Make(3);
    std::vector<std::unique_ptr<Subprocess>> w;
    w.reserve(3);
    for (int i = 0; i < 3; ++i) {
      w.push_back(StartTrainer(flags, c.TfConfig("worker", i), dir / ("ref" + std::to_string(i)),
                               kTestKey, env));
    }
    for (auto& p : w) ASSERT_EQ(p->Wait(180s), 0) << p->Stderr();
    reference = Digest(*w[0]);
    ASSERT_EQ(reference.size(), 64u);
  }
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    LoopbackTfCluster c = LoopbackTfCluster::Make(3);
    const std::string tag = "r" + std::to_string(round) + "w";
    std::vector<std::unique_ptr<Subprocess>> w;
    w.reserve(3);
    // Workers 0 and 1 first: their rendezvous, health and ring ports wait for worker 2 while
    // the stranger knocks at all of them.
    for (int i = 0; i < 2; ++i) {
      w.push_back(StartTrainer(flags, c.TfConfig("worker", i), dir / (tag + std::to_string(i)),
                               kTestKey, env));
    }
    std::atomic<bool> stop{false};
    StrangerCounts counts;
    std::vector<pid_t> pids = {w[0]->pid(), w[1]->pid()};
    std::thread stranger([&] { Stranger(pids, stop, counts); });
    std::this_thread::sleep_for(5s);
    stop = true;
    stranger.join();
    // Worker 2 joins; the stranger comes back for its ports too.
    w.push_back(StartTrainer(flags, c.TfConfig("worker", 2), dir / (tag + "2"), kTestKey, env));
    pids.push_back(w[2]->pid());
    stop = false;
    std::thread stranger2([&] { Stranger(pids, stop, counts); });
    std::vector<std::optional<int>> codes;
    codes.reserve(w.size());
    for (auto& p : w) codes.push_back(p->Wait(240s));
    stop = true;
    stranger2.join();
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(codes[i], 0) << "worker " << i << ": " << w[i]->Stderr();
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(Digest(*w[i]), reference) << "worker " << i;
    // The stranger did reach the forming gang's ring and health ports and its rendezvous.
    EXPECT_GT(counts.ring_hellos.load(), 0);
    EXPECT_GT(counts.health_hellos.load(), 0);
    EXPECT_GT(counts.rendezvous_hellos.load(), 0);
    // Worker 0's ring port waited for worker 2 and closed the stranger's connections.
    EXPECT_NE(w[0]->Stderr().find("all-reduce ring port of rank 0: connection from 127.0.0.1:"),
              std::string::npos)
        << w[0]->Stderr();
    std::printf("round %d: %d stranger connections (%d ring, %d health, %d rendezvous hellos)\n",
                round, counts.connections.load(), counts.ring_hellos.load(),
                counts.health_hellos.load(), counts.rendezvous_hellos.load());
  }
}

}  // namespace
}  // namespace tj::testing
