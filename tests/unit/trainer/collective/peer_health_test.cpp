// The socket layer's error codes and what ProbePeer makes of them: a peer that answers with
// its proof is alive, one whose port refuses or whose connection closes is gone, one that
// accepts but never answers (a stopped process: the kernel still accepts for it) does not
// respond. The responder answers only probes with the job's key, of this gang, and strangers
// that hold a connection open do not keep it from answering the real probes.
#include "trainer/collective/peer_health.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "trainer/cluster/socket.h"

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

const cluster::GangKey kAuth{"health-test-key", 3};

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
  // Without the key, or of another gang, or to the wrong rank: no answer that proves anything.
  EXPECT_EQ(ProbePeer(address, 0, 1, cluster::GangKey{"other-key", 3}, milliseconds(1000)),
            PeerState::kGone);
  EXPECT_EQ(ProbePeer(address, 0, 1, cluster::GangKey{"health-test-key", 2}, milliseconds(1000)),
            PeerState::kGone);
  EXPECT_EQ(ProbePeer(address, 0, 2, kAuth, milliseconds(1000)), PeerState::kGone);
}

}  // namespace
}  // namespace tj::collective
