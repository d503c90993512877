// The socket layer's error codes and what ProbePeer makes of them: a peer that answers with
// its proof is alive, one whose port refuses is gone, one that accepts but never answers (a
// stopped process: the kernel still accepts for it) does not respond, one whose responder
// speaks but closes every probe unanswered (its handshake slots flooded) is busy, never gone.
// The responder answers only probes with the job's key, of this gang, and strangers that hold
// connections open or flood its port do not keep it from answering the real probes.
#include "trainer/collective/peer_health.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/loopback_flood.h"
#include "tests/support/subprocess.h"
#include "trainer/cluster/config/host_port.h"
#include "trainer/cluster/net/socket.h"

namespace tj::collective {
namespace {

using cluster::AcceptTcp;
using cluster::ConnectTcp;
using cluster::DeadlineIn;
using cluster::ListenTcp;
using cluster::LocalPort;
using cluster::Socket;
using std::chrono::milliseconds;
using tj::testing::FreePort;  // a port on which nothing listens

const cluster::GangIdentity kAuth{.gang = 3, .job_key = "health-test-key"};

TEST(SocketCodes, RefusedTimedOutAndClosedAreTellable) {
  auto refused = ConnectTcp("127.0.0.1", FreePort(), DeadlineIn(milliseconds(1000)));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().message();
  EXPECT_EQ(refused.status().message(), "connect: Connection refused");

  Socket listener = std::move(ListenTcp("127.0.0.1", 0)).value();
  auto client = ConnectTcp("127.0.0.1", LocalPort(listener), DeadlineIn(milliseconds(1000)));
  ASSERT_TRUE(client.ok()) << client.status().message();
  auto server = AcceptTcp(listener, DeadlineIn(milliseconds(1000)));
  ASSERT_TRUE(server.ok()) << server.status().message();
  char byte = 0;
  Status silent = client->ReadExactly(&byte, 1, DeadlineIn(milliseconds(50)));
  EXPECT_EQ(silent.code(), StatusCode::kDeadlineExceeded) << silent.message();
  EXPECT_EQ(silent.message(), "timed out reading");

  server->Close();
  Status closed = client->ReadExactly(&byte, 1, DeadlineIn(milliseconds(1000)));
  EXPECT_EQ(closed.code(), StatusCode::kUnavailable) << closed.message();
  EXPECT_EQ(closed.message(), "connection closed by peer");
}

TEST(ProbePeer, AliveGoneAndNotResponding) {
  auto responder = PeerHealthResponder::Start("127.0.0.1", 1, kAuth);
  ASSERT_TRUE(responder.ok()) << responder.status().message();
  EXPECT_EQ(ProbePeer((*responder)->address(), 0, 1, kAuth, milliseconds(2000)), PeerState::kAlive);

  EXPECT_EQ(ProbePeer("127.0.0.1:" + std::to_string(FreePort()), 0, 1, kAuth, milliseconds(2000)),
            PeerState::kGone);

  // Listening, never accepting or writing: the connection is made, the answer never comes.
  Socket hung = std::move(ListenTcp("127.0.0.1", 0)).value();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(
      ProbePeer("127.0.0.1:" + std::to_string(LocalPort(hung)), 0, 1, kAuth, milliseconds(200)),
      PeerState::kNotResponding);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));

  EXPECT_EQ(ProbePeer("not an address", 0, 1, kAuth, milliseconds(200)), PeerState::kUnknown);
}

TEST(ProbePeer, TheResponderAnswersOnlyTheGangAndStrangersDoNotDelayIt) {
  auto responder = PeerHealthResponder::Start("127.0.0.1", 1, kAuth);
  ASSERT_TRUE(responder.ok()) << responder.status().message();
  const std::string address = (*responder)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  // Silent strangers hold connections open (2 s handshake timeout each).
  std::vector<Socket> silent;
  for (int i = 0; i < 30; ++i) {
    auto s = ConnectTcp("127.0.0.1", port, DeadlineIn(milliseconds(1000)));
    ASSERT_TRUE(s.ok());
    silent.push_back(std::move(s).value());
  }
  // A real probe is answered at once, alongside them.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ProbePeer(address, 0, 1, kAuth, milliseconds(1000)), PeerState::kAlive);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(500));
  // Without the key, or of another gang, or to the wrong rank: no answer that proves anything
  // (the responder closes each try unanswered until the probe's time is up).
  EXPECT_EQ(ProbePeer(address, 0, 1, cluster::GangIdentity{.gang = 3, .job_key = "other-key"},
                      milliseconds(300)),
            PeerState::kBusy);
  EXPECT_EQ(ProbePeer(address, 0, 1, cluster::GangIdentity{.gang = 2, .job_key = "health-test-key"},
                      milliseconds(300)),
            PeerState::kBusy);
  EXPECT_EQ(ProbePeer(address, 0, 2, kAuth, milliseconds(300)), PeerState::kBusy);
}

// A responder whose handshake slots a flood holds closes a probe after its hello, unanswered.
// That is not a lost peer: the probe tries again within its time, and says kBusy if no try
// got through. Before, the first such close was reported as the peer's process gone, and the
// collective's error blamed a live replica.
TEST(ProbePeer, AProbeClosedUnansweredIsRetriedAndNeverCalledGone) {
  Socket listener = std::move(ListenTcp("127.0.0.1", 0)).value();
  const std::string address = cluster::FormatHostPort("127.0.0.1", LocalPort(listener));
  // Closes the first `closes` connections after a server hello, as an acceptor at its bound
  // does (until *stop); then, when `then_answer`, serves the real handshake.
  std::atomic<bool> stop{false};
  auto flooded_responder = [&](int closes, bool then_answer) {
    return std::thread([&listener, &stop, closes, then_answer] {
      for (int i = 0; i < closes && !stop.load();) {
        auto s = AcceptTcp(listener, DeadlineIn(milliseconds(100)));
        if (!s.ok() || !s->valid()) continue;
        ++i;
        const std::string hello = std::string("TJCH\x01\x02", 6) + std::string(4 + 32, '\0');
        (void)s->WriteAll(hello.data(), hello.size(), DeadlineIn(milliseconds(1000)));
        char buf[cluster::kLinkClientHelloBytes];
        (void)s->ReadExactly(buf, sizeof buf, DeadlineIn(milliseconds(1000)));
      }
      if (!then_answer) return;
      cluster::LinkAcceptorOptions ao;
      ao.channel = cluster::Channel::kHealth;
      ao.own_rank = 1;
      ao.identity = kAuth;
      cluster::LinkAcceptor acceptor(&listener, ao);
      (void)acceptor.Next(
          DeadlineIn(milliseconds(5000)), [](int r) { return r == 0; }, &stop);
    });
  };
  std::thread closes_then_answers = flooded_responder(3, true);
  EXPECT_EQ(ProbePeer(address, 0, 1, kAuth, milliseconds(5000)), PeerState::kAlive);
  stop.store(true);
  closes_then_answers.join();
  stop.store(false);

  std::thread closes_every_try = flooded_responder(1 << 30, false);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ProbePeer(address, 0, 1, kAuth, milliseconds(500)), PeerState::kBusy);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
  stop.store(true);
  closes_every_try.join();
}

// Strangers from 16 addresses (two floods) flood the responder's port with the first byte of a
// valid hello each and hold on. Each of 20 probes, tried once, still gets the responder's proof.
// Before, the responder's acceptor closed the one connection that had sent nothing yet at every new
// one: the real probe's.
TEST(PeerHealthResponder, AFloodOfPartialHellosCannotPushOutTheProbes) {
  constexpr int kProbes = 20;
  auto responder = PeerHealthResponder::Start("127.0.0.1", 1, kAuth);
  ASSERT_TRUE(responder.ok()) << responder.status().message();
  const std::string address = (*responder)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  tj::testing::LoopbackFlood flood(port, 2, 8, "T", 200), more(port, 10, 8, "T", 200);
  while (flood.connections() < 500) std::this_thread::sleep_for(milliseconds(10));
  int answered = 0;
  std::string failures;
  for (int i = 0; i < kProbes; ++i) {
    auto s = ConnectTcp("127.0.0.1", port, DeadlineIn(milliseconds(5000)));
    ASSERT_TRUE(s.ok()) << s.status().message();
    auto proved = cluster::LinkHandshake(std::move(s).value(), cluster::Channel::kHealth, 0, 1,
                                         kAuth, DeadlineIn(milliseconds(5000)));
    if (proved.ok()) {
      ++answered;
    } else {
      failures += proved.status().message() + "\n";
    }
  }
  std::cout << "flood: " << flood.connections() + more.connections() << " connections, " << answered
            << " of " << kProbes << " probes answered\n";
  EXPECT_EQ(answered, kProbes) << failures;
}

}  // namespace
}  // namespace tj::collective
