// Authenticated connections between the tasks of one gang: the all-reduce ring's and the
// peer-health probes'. Every trainer port but the chief's rendezvous takes connections
// through this handshake; a connection that does not prove it holds the job's key
// (TJ_RENDEZVOUS_KEY), for this gang (TJ_RESTART_COUNT), from the rank it claims, to this rank
// and channel, is closed without costing the real peers their deadline:
//
// - the acceptor (handshake_acceptor.h, the rendezvous chief's too) runs every pending
//   handshake at once in one poll(2) loop (no connection is served before another), each with
//   its own short deadline, at most max_pending at once (a new one beyond that closes the
//   oldest of the address that holds the most);
// - the server speaks first (its nonce, at accept), the client answers in one message of a
//   fixed size; a wrong magic, version or channel is closed as soon as its first bytes arrive;
// - the server answers an accepted client with its own proof, so the client knows it reached
//   the rank it meant, not a process that reused the address.
//
// Wire format, version 1 (integers big-endian):
//   server hello:  "TJCH" u8 version u8 channel u32 server_rank nonce[32]            (42 bytes)
//   client hello:  "TJCH" u8 version u8 channel u32 from_rank i64 gang nonce[32] proof[32]
//                                                                                     (82 bytes)
//   server proof:  proof[32]           (accepted; the connection is the caller's from here)
// Authentication is at connect time: the bytes that follow are not authenticated one by one
// (the all-reduce keeps its speed); an attacker who can inject into an established TCP stream
// is outside the threat model (docs/reliability.md).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/cluster/handshake_acceptor.h"
#include "trainer/cluster/rendezvous.h"
#include "trainer/cluster/socket.h"

namespace tj::cluster {

// What a connection is for: a proof for one channel does not open another.
enum class Channel : uint8_t { kRing = 1, kHealth = 2 };
const char* ChannelName(Channel channel);

// The job's key and this task's gang: what every connection proves.
struct GangKey {
  std::string key;    // TJ_RENDEZVOUS_KEY: required
  int64_t gang = -1;  // TJ_RESTART_COUNT; -1 for a run by hand (then every task the same)
};

// ---- The proofs (pure functions, exposed for tests).
struct LinkTranscript {
  Channel channel = Channel::kRing;
  int64_t gang = -1;
  uint32_t from_rank = 0;  // the connecting task's rank
  uint32_t to_rank = 0;    // the accepting task's rank
  Nonce server_nonce{};
  Nonce client_nonce{};
};
StatusOr<Mac> LinkClientProof(std::string_view key, const LinkTranscript& t);
StatusOr<Mac> LinkServerProof(std::string_view key, const LinkTranscript& t);

inline constexpr size_t kLinkServerHelloBytes = 4 + 1 + 1 + 4 + 32;
inline constexpr size_t kLinkClientHelloBytes = 4 + 1 + 1 + 4 + 8 + 32 + 32;

// The client hello for transcript t (its proof included), and what a server makes of one:
// the claimed rank and gang, or why it is refused. Exposed for tests.
StatusOr<std::string> LinkClientHello(std::string_view key, const LinkTranscript& t);
struct HelloCheck {
  bool complete = false;  // all kLinkClientHelloBytes are there (else: wait for more)
  Status refusal;         // not ok: close the connection, for this reason
  uint32_t from_rank = 0;
  int64_t gang = -1;
};
// `received` is what arrived so far (at most kLinkClientHelloBytes). Garbage is refused as
// soon as its first bytes show it (a wrong magic, version or channel).
HelloCheck CheckLinkClientHello(std::string_view received, std::string_view key, int64_t gang,
                                Channel channel, uint32_t own_rank, const Nonce& server_nonce);

struct LinkAcceptorOptions {
  Channel channel = Channel::kRing;
  int own_rank = 0;
  GangKey auth;
  // A connection must complete its hello this long after it was accepted (dripping bytes
  // does not extend it).
  std::chrono::milliseconds handshake_timeout{5000};
  // At most this many handshakes at once; a new connection beyond it closes the oldest one of
  // the address that holds the most (handshake_acceptor.h).
  int max_pending = 64;
  // Refused and dropped connections are logged here (Warn, at most a few lines a minute).
  // May be null. Must outlive the acceptor.
  EventLog* log = nullptr;
};

// A listening socket's accept loop with the handshake above, on HandshakeAcceptor. Not
// thread-safe: one thread calls Next at a time (the pending handshakes carry over between
// calls).
class LinkAcceptor {
 public:
  LinkAcceptor(Socket* listener, LinkAcceptorOptions options);
  ~LinkAcceptor();
  LinkAcceptor(const LinkAcceptor&) = delete;
  LinkAcceptor& operator=(const LinkAcceptor&) = delete;

  struct Accepted {
    Socket socket;  // invalid: nothing accepted before the deadline (or the stop)
    int rank = -1;
  };
  // Serves the listener and the pending handshakes until one from a rank `wanted` accepts
  // completes (it is sent the server's proof and returned), `deadline` passes or *stop is
  // set (checked every 100 ms). Connections from other ranks, with a wrong proof, gang or
  // channel, garbage, silence past the handshake timeout are closed and counted.
  StatusOr<Accepted> Next(Deadline deadline, const std::function<bool(int)>& wanted,
                          const std::atomic<bool>* stop = nullptr);

  // Connections closed unauthenticated so far, and the last reason (for the error a caller
  // reports when its peer never came).
  int refused_count() const { return refused_; }
  const std::string& last_refusal() const { return last_refusal_; }

 private:
  // Reads what the peer sent; an accepted connection goes to *done_ (kFinishedReturn).
  HandshakeProtocol::Step Advance(PendingHandshake& p);
  void Dropped(const PendingHandshake* p, HandshakeDrop why, const std::string& detail);
  void Refuse(const PendingHandshake& p, const std::string& why);

  LinkAcceptorOptions options_;
  HandshakeAcceptor acceptor_;
  const std::function<bool(int)>* wanted_ = nullptr;  // during Next
  Accepted* done_ = nullptr;                          // during Next
  int refused_ = 0;
  std::string last_refusal_;
  std::chrono::steady_clock::time_point warn_window_start_{};
  int warned_in_window_ = 0;
};

// The client's side of the handshake on a connected socket, to rank `to_rank` for `channel`,
// before the deadline: the socket, authenticated both ways, or why not (no answer, or a wrong
// one: the listener refused this task, or is not the rank its address was published for).
StatusOr<Socket> LinkHandshake(Socket socket, Channel channel, int from_rank, int to_rank,
                               const GangKey& auth, Deadline deadline);

// The address of a listener to publish: "host:port" ("[v6]:port").
std::string LinkAddress(const std::string& host, int port);

}  // namespace tj::cluster
