// The chief's side of the rendezvous: the key-value store (key_value_store.h), served on the
// chief's own TF_CONFIG port. Each peer and the chief prove to each other that they hold the
// job's key for this gang (wire/rendezvous_protocol.h), and every message after that is
// authenticated. A wrong proof is refused, logged and the connection closed; the server keeps
// serving the good peers for the whole run.
//
// The chief's port is open to the pod network, so the server is built for a flood: one
// thread runs every handshake (net/handshake_acceptor.h), a bounded number at once, each with
// a deadline; only authenticated sessions get a thread. Every socket operation has a
// deadline; nothing here can hang forever.
#pragma once

#include <atomic>
#include <chrono>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "common/event_log.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "trainer/cluster/config/gang_identity.h"
#include "trainer/cluster/net/handshake_acceptor.h"
#include "trainer/cluster/net/socket.h"
#include "trainer/cluster/rendezvous/key_value_store.h"
#include "trainer/cluster/wire/rendezvous_protocol.h"

namespace tj::cluster {

struct RendezvousServerOptions {
  // Address to listen on; empty = all interfaces. The port is the chief's TF_CONFIG port
  // (0 picks a free one, for tests).
  std::string bind_host;
  int port = 0;
  // The job's key (required: Start refuses an empty one) and the gang this chief serves (a task
  // of another gang is refused); both are part of both proofs.
  GangIdentity identity;
  // The chief's own task name ("worker 0"), part of both proofs.
  std::string chief_task;
  // Deadline of each message once a request has started.
  std::chrono::milliseconds io_timeout{10000};
  // A connecting peer must finish its handshake this long after it was accepted, or it is
  // closed; dripping bytes does not extend it.
  std::chrono::milliseconds handshake_timeout{10000};
  // At most this many connections in their handshake at once (all served by one thread,
  // net/handshake_acceptor.h); a new connection beyond it closes the oldest one of the address
  // that holds the most. Capped further by the process's file descriptor limit.
  int max_pending = 1024;
  // At most this many authenticated sessions (one thread each); more are refused (the peer
  // retries). Rendezvous::Join raises it to twice the collective's size when that is more.
  int max_sessions = 256;
  // Where refused peers and protocol errors are reported (Warn, rate-limited). Must outlive
  // the server.
  EventLog* log = nullptr;
};

// Serves the store from Start() until destruction: one thread accepts connections and runs
// every handshake (non-blocking, each with its deadline), one thread per authenticated
// session serves its requests. Thread-safe.
class RendezvousServer {
 public:
  static StatusOr<std::unique_ptr<RendezvousServer>> Start(const RendezvousServerOptions& options);
  ~RendezvousServer();  // stops serving, closes every connection, joins its threads
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }
  // The served store, for use inside the chief's own process.
  KeyValueStore& local_store();
  // Connections refused so far for a wrong key or another gang (for tests and metrics).
  int refused_count() const { return acceptor_->refused_count(); }
  // Connections closed before authenticating: garbage, timed out, or pushed out by newer ones
  // when max_pending were waiting (for tests and metrics).
  int dropped_count() const { return acceptor_->dropped_count(); }
  // Handshakes in progress and authenticated sessions open now (for tests).
  int pending_count() const { return pending_now_.load(); }
  int session_count();

 private:
  class Store;
  struct Session;
  explicit RendezvousServer(const RendezvousServerOptions& options);
  void Loop();
  // What becomes of a connection whose hello grew: handed to a session thread, or refused.
  HandshakeStep Judge(PendingHandshake& p);
  HandshakeStep RefuseWrongKey(PendingHandshake& p, const std::string& claimed);
  HandshakeStep RefuseOtherGang(PendingHandshake& p, const RendezvousClientHello& hello,
                                const std::string& claimed);
  // Refuses a key holder with `reason` (it retries), and says why in the log (not rate-limited:
  // the chief's own trouble, not a stranger's).
  HandshakeStep TurnAway(PendingHandshake& p, const std::string& claimed, const std::string& reason,
                         const std::string& why);
  // Starts the session thread of an accepted connection.
  void StartSession(PendingHandshake& p, const std::string& task, const Mac& session_key)
      TJ_REQUIRES(sessions_mu_);
  void Serve(Session* session);
  Status HandleRequests(Session& session);
  void ReapFinished();

  RendezvousServerOptions options_;
  Socket listener_;
  int port_ = 0;
  std::unique_ptr<Store> store_;
  std::unique_ptr<HandshakeAcceptor> acceptor_;  // served by the loop thread only
  std::atomic<bool> stop_{false};
  std::atomic<int> pending_now_{0};
  Mutex sessions_mu_;
  std::list<Session> sessions_ TJ_GUARDED_BY(sessions_mu_);
  std::thread loop_thread_;
};

}  // namespace tj::cluster
