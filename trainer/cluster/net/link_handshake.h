// Authenticated connections between the tasks of one gang: the all-reduce ring's and the
// peer-health probes'. Every trainer port but the chief's rendezvous takes connections
// through this handshake (its messages: wire/link_protocol.h); a connection that does not
// prove it holds the job's key (TJ_RENDEZVOUS_KEY), for this gang (TJ_RESTART_COUNT), from the
// rank it claims, to this rank and channel, is closed without costing the real peers their
// deadline:
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
#include "trainer/cluster/config/gang_identity.h"
#include "trainer/cluster/net/handshake_acceptor.h"
#include "trainer/cluster/net/socket.h"
#include "trainer/cluster/wire/link_protocol.h"

namespace tj::cluster {

struct LinkAcceptorOptions {
  Channel channel = Channel::kRing;
  int own_rank = 0;
  GangIdentity identity;  // this task's: what a connecting task must prove
  // A connection must complete its hello this long after it was accepted (dripping bytes
  // does not extend it).
  std::chrono::milliseconds handshake_timeout{5000};
  // At most this many handshakes at once; a new connection beyond it closes the oldest one of
  // the address that holds the most (handshake_acceptor.h).
  int max_pending = 64;
  // Refused and dropped connections are logged here (Warn, at most 10 lines a minute).
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

  // Connections closed unauthenticated so far, and the last one with its reason (for the error
  // a caller reports when its peer never came).
  int refused_count() const { return acceptor_.refused_count() + acceptor_.dropped_count(); }
  const std::string& last_refusal() const { return acceptor_.last_closed(); }

 private:
  // What becomes of a connection whose hello grew; an accepted one goes to *done_
  // (kDoneReturn).
  HandshakeStep Judge(PendingHandshake& p);

  LinkAcceptorOptions options_;
  HandshakeAcceptor acceptor_;
  const std::function<bool(int)>* wanted_ = nullptr;  // during Next
  Accepted* done_ = nullptr;                          // during Next
};

// The client's side of the handshake on a connected socket, to rank `to_rank` for `channel`,
// before the deadline: the socket, authenticated both ways, or why not (no answer, or a wrong
// one: the listener refused this task, or is not the rank its address was published for).
StatusOr<Socket> LinkHandshake(Socket socket, Channel channel, int from_rank, int to_rank,
                               const GangIdentity& identity, Deadline deadline);

}  // namespace tj::cluster
