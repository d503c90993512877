// The rendezvous: a tiny key-value store that the chief serves on its own TF_CONFIG port, so
// that the collective's processes can find each other (Gloo's full-mesh bootstrap, later the
// NCCL unique id). The job's key (TJ_RENDEZVOUS_KEY) is required: the chief and each peer
// prove to each other that they hold it, and every message after that is authenticated
// (see "Authentication" below). A wrong proof is refused, logged and the connection closed;
// the server keeps serving the good peers for the whole run.
//
// The chief's port is open to the pod network, so the server is built for a flood: one
// thread runs every handshake, a bounded number at once, each with a deadline; only
// authenticated sessions get a thread. Every socket operation has a deadline; nothing here
// can hang forever.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/event_log.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "trainer/cluster/socket.h"

namespace tj::cluster {

// A string -> bytes store shared by the processes of one collective. Implementations are
// thread-safe.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // Sets (or overwrites) key.
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // The value of key; an error if the key is not set.
  virtual StatusOr<std::string> Get(const std::string& key) = 0;
  // Returns when every key is set, or an error naming the missing keys after `timeout`.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

// ---- Authentication (pure functions, exposed for tests).
//
// Both sides prove they hold the job's key: the server sends a nonce, the client answers with
// its own nonce and an HMAC over both nonces, both roles (its task name, the chief's task
// name) and the gang's number (TJ_RESTART_COUNT); the server answers with an HMAC of its own
// over the same transcript. A task of another gang that holds the key is refused with the
// chief's gang and a proof over it: a task of an older gang stops at once (it was replaced), a
// task of a newer one waits for its own chief. Each side
// derives a session key from it, and every message that follows carries an HMAC under that
// key and a per-direction sequence number: a connection cannot be taken over, replayed or
// spliced into another once the handshake is done. Every HMAC failure fails closed (an
// error, never an empty or zero MAC that could match).
using Nonce = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 32>;

// What both proofs and the session key are computed over.
struct HandshakeTranscript {
  Nonce server_nonce{};
  Nonce client_nonce{};
  std::string client_task;  // "worker 1"
  std::string chief_task;   // "worker 0" (or "chief 0")
  int64_t gang = -1;        // the gang's number (TJ_RESTART_COUNT); -1 for a run by hand
};
StatusOr<Mac> ClientProof(std::string_view key, const HandshakeTranscript& t);
StatusOr<Mac> ServerProof(std::string_view key, const HandshakeTranscript& t);
StatusOr<Mac> SessionKey(std::string_view key, const HandshakeTranscript& t);
// The chief's proof when it refuses a key holder of another gang: over the transcript with
// the chief's own gang in it.
StatusOr<Mac> OtherGangProof(std::string_view key, const HandshakeTranscript& t);
// Constant-time comparison.
bool MacEquals(const Mac& a, const Mac& b);
// A fresh nonce from the kernel's CSPRNG.
StatusOr<Nonce> NewNonce();

// The message a refused client reports (and the lead can match on): names the chief.
inline constexpr std::string_view kWrongKeyReason = "wrong TJ_RENDEZVOUS_KEY";

struct RendezvousServerOptions {
  // Address to listen on; empty = all interfaces. The port is the chief's TF_CONFIG port
  // (0 picks a free one, for tests).
  std::string bind_host;
  int port = 0;
  // The job's rendezvous key: required (Start refuses an empty one).
  std::string key;
  // The chief's own task name ("worker 0"), part of both proofs.
  std::string chief_task;
  // The gang this chief serves (TJ_RESTART_COUNT; -1 by hand), part of both proofs: a task of
  // another gang is refused.
  int64_t gang = -1;
  // Deadline of each message once a request has started.
  std::chrono::milliseconds io_timeout{10000};
  // A connecting peer must finish its handshake this long after it was accepted, or it is
  // closed; dripping bytes does not extend it.
  std::chrono::milliseconds handshake_timeout{10000};
  // At most this many connections in their handshake at once (all served by one thread,
  // handshake_acceptor.h); a new connection beyond it closes the oldest one of the address
  // that holds the most. Capped further by the process's file descriptor limit.
  int max_pending = 1024;
  // At most this many authenticated sessions (one thread each); more are refused (the peer
  // retries). Rendezvous::Join raises it to twice the collective's size when that is more.
  int max_sessions = 256;
  // Where refused peers and protocol errors are reported (Warn, rate-limited). Must outlive
  // the server.
  EventLog* log = nullptr;
};

struct PendingHandshake;   // handshake_acceptor.h
enum class HandshakeDrop;  // handshake_acceptor.h

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
  int refused_count() const { return refused_.load(); }
  // Connections closed before authenticating: garbage, timed out, or pushed out by newer ones
  // when max_pending were waiting (for tests and metrics).
  int dropped_count() const { return dropped_.load(); }
  // Handshakes in progress and authenticated sessions open now (for tests).
  int pending_count() const { return pending_now_.load(); }
  int session_count();

 private:
  class Store;
  struct Session;
  explicit RendezvousServer(const RendezvousServerOptions& options);
  void Loop();
  // Reads what the peer sent; true when the connection is finished with (closed or handed to
  // a session thread).
  bool Advance(PendingHandshake& p);
  void Dropped(const PendingHandshake* p, HandshakeDrop why, const std::string& detail);
  // Refusals; true (the connection is finished with).
  bool RefuseWrongKey(PendingHandshake& p, const std::string& who);
  bool RefuseOtherGang(PendingHandshake& p, const std::string& who, const std::string& task,
                       const Nonce& client_nonce, int64_t client_gang, const Mac& proof);
  void Serve(Session* session);
  Status HandleRequests(Session& session);
  void ReapFinished();
  // Warns about an unauthenticated connection, at most a few lines a minute (a flood must not
  // flood the log too); the rest is counted and summarised.
  void WarnUnauthenticated(const std::string& message);

  RendezvousServerOptions options_;
  Socket listener_;
  int port_ = 0;
  std::unique_ptr<Store> store_;
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0};
  std::atomic<int> dropped_{0};
  std::atomic<int> pending_now_{0};
  std::chrono::steady_clock::time_point warn_window_start_{};  // loop thread only
  int warned_in_window_ = 0, suppressed_in_window_ = 0;        // loop thread only
  Mutex sessions_mu_;
  std::list<Session> sessions_ TJ_GUARDED_BY(sessions_mu_);
  std::thread loop_thread_;
};

struct RendezvousClientOptions {
  std::string chief_address;  // "host:port"
  std::string chief_name;     // "worker 0": the chief's task name, part of both proofs
  std::string task_name;      // this task ("worker 1"): part of both proofs
  std::string key;            // the job's key: required
  int64_t gang = -1;          // this task's gang (TJ_RESTART_COUNT; -1 by hand)
  // Keep retrying to reach the chief (and to be accepted by it) until this much time passed.
  std::chrono::milliseconds rendezvous_timeout{300000};
  // Deadline of each message exchange.
  std::chrono::milliseconds io_timeout{10000};
  Clock* clock = nullptr;  // for the retry deadline and backoff; RealClock when null
};

// An authenticated session with the chief's store. Thread-safe (requests are serialised).
class RendezvousClient final : public KeyValueStore {
 public:
  // Connects and authenticates both ways, retrying every failure (unreachable, refused, a
  // chief that cannot prove it holds the key) until options.rendezvous_timeout. Errors:
  //   an empty key (kPermissionDenied, at once);
  //   "rendezvous with chief host:port (worker 0) refused: wrong TJ_RENDEZVOUS_KEY (...)"
  //   or "... failed: could not reach it within 300 s (last error: ...); check ..."
  //   after the timeout (kDeadlineExceeded: a gang restart may help);
  //   at once, when the chief proves it serves a newer gang: "... refused: this task is of
  //   gang 2 (TJ_RESTART_COUNT), the chief serves gang 3: ..." (kPermissionDenied: this
  //   task was replaced and must not take part).
  static StatusOr<std::unique_ptr<RendezvousClient>> Connect(const RendezvousClientOptions& o);

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  RendezvousClient(const RendezvousClientOptions& o, Socket socket, const Mac& session_key)
      : options_(o), socket_(std::move(socket)), session_key_(session_key) {}
  // Sends one request and reads its authenticated reply.
  StatusOr<std::string> Exchange(const std::string& what, const std::string& request,
                                 Deadline deadline) TJ_REQUIRES(mu_);
  Status Fail(const std::string& what, const Status& status) TJ_REQUIRES(mu_);

  RendezvousClientOptions options_;
  Mutex mu_;
  Socket socket_ TJ_GUARDED_BY(mu_);
  Mac session_key_ TJ_GUARDED_BY(mu_);
  uint64_t sent_ TJ_GUARDED_BY(mu_) = 0;      // requests sent (the next one's sequence number)
  uint64_t received_ TJ_GUARDED_BY(mu_) = 0;  // replies received
};

// ---- One process's place in the rendezvous: the chief serves, everyone else connects.

struct TfConfig;

struct RendezvousOptions {
  std::string chief_address;  // "host:port" (TfConfig::chief_address())
  std::string chief_name;     // "worker 0"
  std::string task_name;      // this task
  bool is_chief = false;
  int collective_size = 0;  // chief and workers; with more than one an empty key is refused
  std::string key;          // TJ_RENDEZVOUS_KEY: required
  int64_t gang = -1;        // TJ_RESTART_COUNT (-1 by hand): every task of the gang the same
  std::string bind_host;    // the chief's listen address; empty = all interfaces
  std::chrono::milliseconds rendezvous_timeout{300000};
  std::chrono::milliseconds io_timeout{10000};
  EventLog* log = nullptr;  // required on the chief
  Clock* clock = nullptr;   // RealClock when null
};

// Fills chief, task, role and size fields from a TfConfig (a collective member).
RendezvousOptions RendezvousOptionsFor(const TfConfig& config);

// Holds the chief's server or a peer's client for as long as the process needs the store.
class Rendezvous {
 public:
  static StatusOr<std::unique_ptr<Rendezvous>> Join(const RendezvousOptions& options);
  KeyValueStore& store() { return server_ ? server_->local_store() : *client_; }
  // The server on the chief, null elsewhere.
  RendezvousServer* server() { return server_.get(); }

 private:
  Rendezvous() = default;
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<RendezvousClient> client_;
};

}  // namespace tj::cluster
