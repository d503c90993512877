// The accepting side of every handshake a trainer's listener runs before it serves a
// connection, and all that the two protocols' acceptors share: the rendezvous chief's
// (rendezvous/rendezvous_server.h) and the links' of the all-reduce ring and the peer-health
// probes (link_handshake.h). One poll(2) loop serves every pending handshake at once (no
// connection waits for another's), each with its own deadline from its accept (dripping bytes
// does not extend it), at most max_pending at once: a new connection beyond that closes the
// oldest one of the address that holds the most (so strangers, however many connections they
// open and whatever they send, push out each other before a real peer's one). The server
// speaks first, a hello with a fresh nonce at accept; the acceptor reads what the client
// answers, at most the protocol's longest hello, and the protocol judges it. Every connection
// closed before it authenticated is counted and logged here, in one format, at most a few lines
// a minute (a flood must not flood the log too).
// Not thread-safe: one thread serves it (the counts may be read from any thread).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <string>
#include <string_view>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/cluster/net/socket.h"
#include "trainer/cluster/wire/authentication.h"

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

// What a protocol makes of a pending connection after more of its hello arrived.
struct HandshakeStep {
  enum class Kind {
    kWaiting,     // the rest of its hello is still to come
    kDone,        // done with: accepted and handed on, or answered and closed (not counted)
    kDoneReturn,  // done with, and ServeOnce returns now (the caller has what it waited for)
    kRefused,     // closed: it did not authenticate (a wrong key or gang, an unwanted rank)
    kDropped,     // closed: garbage, or it went away
  };
  Kind kind = Kind::kWaiting;
  std::string reason;   // kRefused, kDropped: what the log line and last_closed() say
  std::string claimed;  // what the hello claimed to be, printed after its address: ("worker 1")

  static HandshakeStep Waiting() { return {}; }
  static HandshakeStep Done() { return {Kind::kDone, "", ""}; }
  static HandshakeStep DoneReturn() { return {Kind::kDoneReturn, "", ""}; }
  static HandshakeStep Refused(std::string why, std::string claimed = "") {
    return {Kind::kRefused, std::move(why), std::move(claimed)};
  }
  static HandshakeStep Dropped(std::string why) { return {Kind::kDropped, std::move(why), ""}; }
};

struct HandshakeProtocol {
  // The server's hello to a new connection, with its nonce.
  std::function<std::string(const Nonce&)> hello;
  // The longest client hello: a connection that sends more before its answer is closed.
  size_t max_hello_bytes = 0;
  // What becomes of a connection whose PendingHandshake::received just grew.
  std::function<HandshakeStep(PendingHandshake&)> judge;
};

struct HandshakeAcceptorOptions {
  std::chrono::milliseconds handshake_timeout{5000};
  int max_pending = 64;
  int accept_batch = 64;  // connections accepted per wake-up at most, so the pending are served
  // Where connections closed before they authenticated are reported (Warn), as
  // "<log_prefix>: connection from <peer>: <why>; connection closed", at most
  // warnings_per_minute lines a minute (the rest are counted, and summed up in a line when the
  // next minute's first comes). May be null; must outlive the acceptor.
  EventLog* log = nullptr;
  std::string log_prefix;
  int warnings_per_minute = 10;
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
  // handshake deadline) for the listener or a pending connection, reads from the readable ones
  // and has the protocol judge them, and accepts new ones. *stop, when given and set, ends the
  // round's accepting. An error only when poll(2) fails (EINTR is not one).
  Status ServeOnce(Deadline until, const std::atomic<bool>* stop = nullptr);

  int pending() const { return static_cast<int>(pending_.size()); }
  // Connections closed before they authenticated: refused by the protocol (a failed proof, an
  // unwanted rank) and dropped (garbage, silence past the deadline, pushed out, gone).
  int refused_count() const { return refused_.load(); }
  int dropped_count() const { return dropped_.load(); }
  // "<peer>: <why>" of the last connection closed so far (empty when none); the serving thread
  // only.
  const std::string& last_closed() const { return last_closed_; }

 private:
  void AcceptBatch(const std::atomic<bool>* stop);
  // Reads what the connection sent and has the protocol judge it; the step to take.
  HandshakeStep Advance(PendingHandshake& p);
  // Makes room for one more: closes the oldest pending of the address holding the most.
  void PushOutOne();
  // Counts and reports a connection closed unauthenticated.
  void Closed(const PendingHandshake& p, const HandshakeStep& step);
  // One warning line, rate-limited.
  void Warn(const std::string& line);

  Socket* listener_;
  HandshakeAcceptorOptions options_;
  HandshakeProtocol protocol_;
  std::list<PendingHandshake> pending_;
  std::atomic<int> refused_{0};
  std::atomic<int> dropped_{0};
  std::string last_closed_;
  std::chrono::steady_clock::time_point warn_window_start_{};
  int warned_in_window_ = 0;
  int suppressed_in_window_ = 0;
};

// One send without waiting: for the small messages of a handshake (a fresh socket's buffer
// holds them), and best effort for a refusal. True when all of `bytes` went.
bool SendNow(const Socket& socket, std::string_view bytes);

}  // namespace tj::cluster
