// The handshake of the ring and peer-health ports: the proofs bind every field; a server's
// check of a client hello refuses garbage from its first bytes, waits for a partial hello,
// accepts exactly the hello a key holder makes; the acceptor over real loopback sockets closes
// silent connections at their deadline, keeps at most max_pending (closing one of the address
// that holds the most first, so a flood cannot push the real peer out) and hands over the
// authenticated peer.
#include "trainer/cluster/net/link_handshake.h"

#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <thread>
#include <vector>

#include "tests/support/loopback_flood.h"

namespace tj::cluster {
namespace {

using std::chrono::milliseconds;

const GangIdentity kAuth{.gang = 4, .job_key = "handshake-test-key"};

LinkTranscript SomeTranscript() {
  LinkTranscript t;
  t.channel = Channel::kRing;
  t.gang = 4;
  t.from_rank = 2;
  t.to_rank = 3;
  t.server_nonce[0] = 1;
  t.client_nonce[0] = 2;
  return t;
}

TEST(LinkProofs, BindTheKeyTheGangTheChannelBothRanksAndBothNonces) {
  const LinkTranscript t = SomeTranscript();
  const Mac proof = *LinkClientProof("k", t);
  EXPECT_TRUE(MacEquals(*LinkClientProof("k", t), proof));
  EXPECT_FALSE(MacEquals(*LinkClientProof("j", t), proof));
  for (int field = 0; field < 6; ++field) {
    LinkTranscript other = t;
    if (field == 0) other.channel = Channel::kHealth;
    if (field == 1) other.gang = 5;
    if (field == 2) other.from_rank = 1;
    if (field == 3) other.to_rank = 0;
    if (field == 4) other.server_nonce[31] ^= 1;
    if (field == 5) other.client_nonce[31] ^= 1;
    EXPECT_FALSE(MacEquals(*LinkClientProof("k", other), proof)) << "field " << field;
  }
  // The server's proof is another MAC: a client's cannot be reflected back.
  EXPECT_FALSE(MacEquals(*LinkServerProof("k", t), proof));
}

TEST(CheckLinkClientHello, RefusesGarbageAtOnceWaitsForMoreAcceptsTheKeyHoldersHello) {
  const LinkTranscript t = SomeTranscript();
  const std::string hello = *LinkClientHello(kAuth.job_key, t);
  ASSERT_EQ(hello.size(), kLinkClientHelloBytes);
  auto check = [&](std::string_view in) {
    return CheckLinkClientHello(in, kAuth, Channel::kRing, 3, t.server_nonce);
  };
  // Every prefix of the real hello: wait for more.
  for (size_t n = 0; n < hello.size(); ++n) {
    HelloCheck c = check(std::string_view{hello}.substr(0, n));
    EXPECT_TRUE(c.refusal.ok() && !c.complete) << n << ": " << c.refusal.message();
  }
  HelloCheck ok = check(hello);
  EXPECT_TRUE(ok.refusal.ok() && ok.complete) << ok.refusal.message();
  EXPECT_EQ(ok.from_rank, 2u);
  EXPECT_EQ(ok.gang, 4);
  // Garbage shows from its first byte, a wrong version from the fifth, the wrong channel from
  // the sixth.
  EXPECT_NE(check("G").refusal.message().find("bad magic"), std::string::npos);
  EXPECT_NE(check("TJCH\x02").refusal.message().find("version 2"), std::string::npos);
  EXPECT_NE(check(std::string("TJCH\x01\x02", 6)).refusal.message().find("another channel"),
            std::string::npos);
  // More than a hello, a wrong key, another gang, another server nonce.
  EXPECT_FALSE(check(hello + "x").refusal.ok());
  const HelloCheck wrong_key = check(*LinkClientHello("other-key", t));
  EXPECT_EQ(wrong_key.refusal.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(wrong_key.refusal.message().find("does not prove it holds TJ_RENDEZVOUS_KEY"),
            std::string::npos);
  LinkTranscript older = t;
  older.gang = 3;
  EXPECT_NE(check(*LinkClientHello(kAuth.job_key, older))
                .refusal.message()
                .find("claims gang 3, this task is of gang 4"),
            std::string::npos);
  // A hello made for another connection's nonce (replayed) does not verify.
  Nonce other_nonce = t.server_nonce;
  other_nonce[5] ^= 1;
  EXPECT_FALSE(CheckLinkClientHello(hello, kAuth, Channel::kRing, 3, other_nonce).refusal.ok());
}

// An acceptor for rank 1 on a loopback listener, served on a thread until it accepts rank 0.
struct AcceptorRun {
  explicit AcceptorRun(int max_pending, milliseconds handshake_timeout)
      : listener(std::move(ListenTcp("127.0.0.1", 0)).value()), port(LocalPort(listener)) {
    LinkAcceptorOptions o;
    o.channel = Channel::kRing;
    o.own_rank = 1;
    o.identity = kAuth;
    o.max_pending = max_pending;
    o.handshake_timeout = handshake_timeout;
    acceptor = std::make_unique<LinkAcceptor>(&listener, o);
    thread = std::thread([this] {
      auto a = acceptor->Next(
          DeadlineIn(milliseconds(10000)), [](int r) { return r == 0; }, &stop);
      if (a.ok() && a->socket.valid()) accepted_rank = a->rank;
    });
  }
  ~AcceptorRun() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
  // The real rank 0 connects and links; the acceptor's thread is done and accepted it.
  void LinkRankZero() {
    auto peer = ConnectTcp("127.0.0.1", port, DeadlineIn(milliseconds(1000)));
    ASSERT_TRUE(peer.ok());
    auto linked = LinkHandshake(std::move(peer).value(), Channel::kRing, 0, 1, kAuth,
                                DeadlineIn(milliseconds(2000)));
    ASSERT_TRUE(linked.ok()) << linked.status().message();
    thread.join();
    EXPECT_EQ(accepted_rank.load(), 0);
  }
  Socket listener;
  int port;
  std::unique_ptr<LinkAcceptor> acceptor;
  std::atomic<bool> stop{false};
  std::atomic<int> accepted_rank{-1};
  std::thread thread;
};

TEST(LinkAcceptor, ClosesSilentConnectionsAtTheirDeadlineAndHandsOverThePeer) {
  AcceptorRun run(/*max_pending=*/64, milliseconds(300));
  auto silent = ConnectTcp("127.0.0.1", run.port, DeadlineIn(milliseconds(1000)));
  ASSERT_TRUE(silent.ok());
  char hello[kLinkServerHelloBytes];
  ASSERT_TRUE(silent->ReadExactly(hello, sizeof hello, DeadlineIn(milliseconds(1000))).ok());
  const auto start = std::chrono::steady_clock::now();
  char byte = 0;
  Status closed = silent->ReadExactly(&byte, 1, DeadlineIn(milliseconds(3000)));
  EXPECT_EQ(closed.code(), StatusCode::kUnavailable) << closed.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500));
  // The real rank 0.
  run.LinkRankZero();
  if (HasFatalFailure()) return;
  EXPECT_GE(run.acceptor->refused_count(), 1);
  EXPECT_NE(run.acceptor->last_refusal().find("sent no complete hello"), std::string::npos)
      << run.acceptor->last_refusal();
}

TEST(LinkAcceptor, AtItsBoundASilentConnectionMakesRoomAndTheWrongRankIsRefused) {
  AcceptorRun run(/*max_pending=*/2, milliseconds(10000));
  std::vector<Socket> silent;
  for (int i = 0; i < 5; ++i) {
    auto s = ConnectTcp("127.0.0.1", run.port, DeadlineIn(milliseconds(1000)));
    ASSERT_TRUE(s.ok());
    silent.push_back(std::move(s).value());
  }
  // The key holder of the wrong rank (2) is refused: this port waits for rank 0.
  auto other = ConnectTcp("127.0.0.1", run.port, DeadlineIn(milliseconds(1000)));
  ASSERT_TRUE(other.ok());
  auto refused = LinkHandshake(std::move(other).value(), Channel::kRing, 2, 1, kAuth,
                               DeadlineIn(milliseconds(2000)));
  EXPECT_FALSE(refused.ok());
  // Rank 0 gets through although silent connections fill the bound.
  run.LinkRankZero();
  if (HasFatalFailure()) return;
  // At least 5 + 2 - 2 silent ones were closed to make room, and the wrong rank refused.
  EXPECT_GE(run.acceptor->refused_count(), 4);
}

// The flood that kept peers out: strangers from 8 addresses send the first byte of a valid
// hello and hold the connection, as fast as they can, so that every accept at the bound must
// close someone. Each of 20 real handshakes, from an address of its own, is tried once.
// Before, the acceptor closed the oldest connection that had sent nothing yet: the real
// peer's, waiting for its own hello to arrive.
TEST(LinkAcceptor, AFloodOfPartialHellosFromManyAddressesCannotPushOutThePeer) {
  constexpr int kHandshakes = 20;
  Socket listener = std::move(ListenTcp("127.0.0.1", 0)).value();
  LinkAcceptorOptions o;
  o.channel = Channel::kRing;
  o.own_rank = 1;
  o.identity = kAuth;
  o.max_pending = 16;
  o.handshake_timeout = milliseconds(5000);
  LinkAcceptor acceptor(&listener, o);
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0};
  std::thread serve([&] {
    while (!stop.load()) {
      auto a = acceptor.Next(
          DeadlineIn(milliseconds(1000)), [](int r) { return r == 0; }, &stop);
      if (a.ok() && a->socket.valid()) accepted.fetch_add(1);
    }
  });
  int linked = 0;
  std::string failures;
  {
    tj::testing::LoopbackFlood flood(LocalPort(listener), 2, 8, "T", 200);
    while (flood.connections() < 500) std::this_thread::sleep_for(milliseconds(10));
    for (int i = 0; i < kHandshakes; ++i) {
      auto peer = ConnectTcp("127.0.0.1", LocalPort(listener), DeadlineIn(milliseconds(5000)));
      ASSERT_TRUE(peer.ok()) << peer.status().message();
      auto done = LinkHandshake(std::move(peer).value(), Channel::kRing, 0, 1, kAuth,
                                DeadlineIn(milliseconds(5000)));
      if (done.ok()) {
        ++linked;
      } else {
        failures += done.status().message() + "\n";
      }
    }
    std::cout << "flood: " << flood.connections() << " connections, " << linked << " of "
              << kHandshakes << " handshakes through\n";
  }
  stop.store(true);
  serve.join();
  EXPECT_EQ(linked, kHandshakes) << failures;
  EXPECT_EQ(accepted.load(), linked);
}

}  // namespace
}  // namespace tj::cluster
