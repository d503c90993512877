// The rendezvous: a tiny key-value store that the chief serves on its own TF_CONFIG port, so
// that the collective's processes can find each other (Gloo's full-mesh bootstrap, later the
// NCCL unique id). When a key is given (TJ_RENDEZVOUS_KEY), every peer proves it holds the
// key: the server sends a random challenge and the client answers
// HMAC-SHA256(key, challenge || task name). A wrong answer is refused, logged and the
// connection closed; the server keeps serving the good peers for the whole run.
//
// Every socket operation has a deadline; nothing here can hang forever.
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
using Challenge = std::array<uint8_t, 32>;
using ChallengeAnswer = std::array<uint8_t, 32>;
// HMAC-SHA256(key, challenge || task_name).
ChallengeAnswer AnswerChallenge(std::string_view key, const Challenge& challenge,
                                std::string_view task_name);
// Constant-time check of an answer.
bool VerifyChallengeAnswer(std::string_view key, const Challenge& challenge,
                           std::string_view task_name, const ChallengeAnswer& answer);
// A fresh challenge from OpenSSL's RAND_bytes.
StatusOr<Challenge> NewChallenge();

// The message a refused client reports (and the lead can match on): names the chief.
inline constexpr std::string_view kWrongKeyReason = "wrong TJ_RENDEZVOUS_KEY";

struct RendezvousServerOptions {
  // Address to listen on; empty = all interfaces. The port is the chief's TF_CONFIG port
  // (0 picks a free one, for tests).
  std::string bind_host;
  int port = 0;
  // The job's rendezvous key; empty = no authentication.
  std::string key;
  // Deadline for a connecting peer's handshake and for each message once it has started.
  std::chrono::milliseconds io_timeout{10000};
  // Where refused peers and protocol errors are reported (Warn). Must outlive the server.
  EventLog* log = nullptr;
};

// Serves the store in background threads from Start() until destruction. Thread-safe.
class RendezvousServer {
 public:
  static StatusOr<std::unique_ptr<RendezvousServer>> Start(const RendezvousServerOptions& options);
  ~RendezvousServer();  // stops serving, closes every connection, joins its threads
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }
  // The served store, for use inside the chief's own process.
  KeyValueStore& local_store();
  // Connections refused so far for a wrong key (for tests and metrics).
  int refused_count() const { return refused_.load(); }

 private:
  class Store;
  struct Connection {
    Socket socket;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  explicit RendezvousServer(const RendezvousServerOptions& options);
  void AcceptLoop();
  void Serve(Connection* connection);
  Status Handshake(Socket& socket, std::string* task_name);
  Status HandleRequests(Socket& socket);
  void ReapFinished();

  RendezvousServerOptions options_;
  Socket listener_;
  int port_ = 0;
  std::unique_ptr<Store> store_;
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0};
  std::mutex connections_mu_;
  std::list<Connection> connections_;  // guarded by connections_mu_
  std::thread accept_thread_;
};

struct RendezvousClientOptions {
  std::string chief_address;  // "host:port"
  std::string chief_name;     // "worker 0", for messages
  std::string task_name;      // this task ("worker 1"): part of the HMAC
  std::string key;            // empty = no authentication
  // Keep retrying to reach the chief until this much time has passed.
  std::chrono::milliseconds rendezvous_timeout{300000};
  // Deadline of each message exchange.
  std::chrono::milliseconds io_timeout{10000};
  Clock* clock = nullptr;  // for the retry deadline and backoff; RealClock when null
};

// A connection to the chief's store. Thread-safe (requests are serialised).
class RendezvousClient final : public KeyValueStore {
 public:
  // Connects and authenticates, retrying until options.rendezvous_timeout. Errors:
  //   "rendezvous with chief host:port (worker 0) refused: wrong TJ_RENDEZVOUS_KEY" at once;
  //   "rendezvous with chief host:port (worker 0) failed: could not reach it within 300 s
  //    (last error: ...); check ..." after the timeout.
  static StatusOr<std::unique_ptr<RendezvousClient>> Connect(const RendezvousClientOptions& o);

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  RendezvousClient(const RendezvousClientOptions& o, Socket socket)
      : options_(o), socket_(std::move(socket)) {}
  Status Fail(const std::string& what, const Status& status);

  RendezvousClientOptions options_;
  std::mutex mu_;
  Socket socket_;  // guarded by mu_
};

// ---- One process's place in the rendezvous: the chief serves, everyone else connects.

struct TfConfig;

struct RendezvousOptions {
  std::string chief_address;  // "host:port" (TfConfig::chief_address())
  std::string chief_name;     // "worker 0"
  std::string task_name;      // this task
  bool is_chief = false;
  std::string key;        // TJ_RENDEZVOUS_KEY; empty = no authentication
  std::string bind_host;  // the chief's listen address; empty = all interfaces
  std::chrono::milliseconds rendezvous_timeout{300000};
  std::chrono::milliseconds io_timeout{10000};
  EventLog* log = nullptr;  // required on the chief
  Clock* clock = nullptr;   // RealClock when null
};

// Fills chief, task and role fields from a TfConfig (a collective member).
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
