// The accepting side of every handshake a trainer's listener runs before it serves a
// connection: the rendezvous chief's (rendezvous.h) and the all-reduce ring's and the peer
// health probes' (peer_handshake.h). One poll(2) loop serves every pending handshake at once
// (no connection waits for another's), each with its own deadline from its accept (dripping
// bytes does not extend it), at most max_pending at once: a new connection beyond that closes
// the oldest one of the address that holds the most (so strangers, however many connections
// they open and whatever they send, push out each other before a real peer's one). The server
// speaks first, a hello
// with a fresh nonce at accept; what the client answers is the protocol's to judge.
// Not thread-safe: one thread serves it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <string>
#include <string_view>

#include "common/status.h"
#include "trainer/cluster/rendezvous.h"
#include "trainer/cluster/socket.h"

namespace tj::cluster {

// A connection in its handshake.
struct PendingHandshake {
  Socket socket;
  std::string peer;      // its address and port, at accept
  std::string source;    // its address alone: what the bound counts per
  Deadline deadline;     // accept + the handshake timeout
  Nonce nonce{};         // in the server's hello
  std::string received;  // what the client sent so far
};

// Why a connection was closed before its handshake was through.
enum class HandshakeDrop {
  kTimedOut,          // no complete hello before its deadline
  kPushedOut,         // max_pending were waiting when a new connection came
  kOutOfDescriptors,  // accept failed (EMFILE): the oldest pending gives its descriptor up
  kNoNonce,           // no fresh nonce could be drawn: no handshake without one
  kGoneBeforeHello,   // the server's hello could not be sent
};

struct HandshakeProtocol {
  // The server's hello to a new connection, with its nonce.
  std::function<std::string(const Nonce&)> hello;
  // What became of a connection that is readable (or closed) after reading from it.
  enum class Step {
    kWaiting,         // the rest of its hello is still to come
    kFinished,        // done with: accepted and handed on, or refused (counted and said so)
    kFinishedReturn,  // done with, and ServeOnce returns now (the caller has what it waited for)
  };
  std::function<Step(PendingHandshake&)> advance;
  // A connection closed for `why`; `detail` is the error for kOutOfDescriptors and kNoNonce.
  // `p` is null for kOutOfDescriptors when no handshake was pending.
  std::function<void(const PendingHandshake* p, HandshakeDrop why, const std::string& detail)>
      dropped;
};

struct HandshakeAcceptorOptions {
  std::chrono::milliseconds handshake_timeout{5000};
  int max_pending = 64;
  int accept_batch = 64;  // connections accepted per wake-up at most, so the pending are served
};

class HandshakeAcceptor {
 public:
  // `listener` must outlive the acceptor.
  HandshakeAcceptor(Socket* listener, HandshakeAcceptorOptions options, HandshakeProtocol protocol);
  HandshakeAcceptor(const HandshakeAcceptor&) = delete;
  HandshakeAcceptor& operator=(const HandshakeAcceptor&) = delete;

  // Closes the pending handshakes whose deadline has passed.
  void ExpireDue();
  // One round: expires what is due, waits until `until` (100 ms at most, or the next
  // handshake deadline) for the listener or a pending connection, advances the readable ones
  // and accepts new ones. *stop, when given and set, ends the round's accepting. An error only
  // when poll(2) fails (EINTR is not one).
  Status ServeOnce(Deadline until, const std::atomic<bool>* stop = nullptr);

  int pending() const { return static_cast<int>(pending_.size()); }

 private:
  void AcceptBatch(const std::atomic<bool>* stop);
  // Makes room for one more: closes the oldest pending of the address holding the most.
  void PushOutOne();

  Socket* listener_;
  HandshakeAcceptorOptions options_;
  HandshakeProtocol protocol_;
  std::list<PendingHandshake> pending_;
};

// One send without waiting: for the small messages of a handshake (a fresh socket's buffer
// holds them), and best effort for a refusal. True when all of `bytes` went.
bool SendNow(const Socket& socket, std::string_view bytes);

}  // namespace tj::cluster
