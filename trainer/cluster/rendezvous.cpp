#include "trainer/cluster/rendezvous.h"

#include <openssl/crypto.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/sha256.h"
#include "trainer/cluster/tf_config.h"

namespace tj::cluster {
namespace {

// Wire format (all integers big-endian):
//   server hello:  "TJRV" u8 version u8 auth_required challenge[32]
//   client hello:  "TJRV" str task_name u8 has_key answer[32]
//   server verdict: u8 (0 accepted, 1 refused) str reason
//   requests:      u8 op, then  Set: str key, str value  -> u8 0
//                               Get: str key             -> u8 found, str value
//                               Wait: u32 n, n x str, u64 timeout_ms -> u8 (0 ok, 1 timed out)
// str = u32 length + bytes (at most kMaxString).
constexpr char kMagic[4] = {'T', 'J', 'R', 'V'};
constexpr uint8_t kVersion = 1;
constexpr uint32_t kMaxString = 64u << 20;
constexpr uint32_t kMaxKeys = 1 << 16;
constexpr uint32_t kMaxTaskName = 256;  // in the client hello, read before authentication
enum Op : uint8_t { kSet = 1, kGet = 2, kWait = 3 };

class Encoder {
 public:
  Encoder& U8(uint8_t v) {
    buf_.push_back(static_cast<char>(v));
    return *this;
  }
  Encoder& U32(uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) buf_.push_back(static_cast<char>((v >> s) & 0xff));
    return *this;
  }
  Encoder& U64(uint64_t v) {
    for (int s = 56; s >= 0; s -= 8) buf_.push_back(static_cast<char>((v >> s) & 0xff));
    return *this;
  }
  Encoder& Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    buf_.append(s);
    return *this;
  }
  Encoder& Bytes(const void* p, size_t n) {
    buf_.append(static_cast<const char*>(p), n);
    return *this;
  }
  Status SendTo(Socket& s, Deadline d) { return s.WriteAll(buf_.data(), buf_.size(), d); }

 private:
  std::string buf_;
};

// Reads fields from a socket, every read bounded by the deadline.
class Decoder {
 public:
  Decoder(Socket& s, Deadline d) : s_(s), d_(d) {}
  Status U8(uint8_t* v) { return s_.ReadExactly(v, 1, d_); }
  Status U32(uint32_t* v) {
    unsigned char b[4];
    TJ_RETURN_IF_ERROR(s_.ReadExactly(b, 4, d_));
    *v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    return Status::Ok();
  }
  Status U64(uint64_t* v) {
    uint32_t hi, lo;
    TJ_RETURN_IF_ERROR(U32(&hi));
    TJ_RETURN_IF_ERROR(U32(&lo));
    *v = (uint64_t{hi} << 32) | lo;
    return Status::Ok();
  }
  // Checks the announced length against `max` before allocating anything: a peer that has
  // not authenticated yet must not make the server allocate (and zero) 64 MiB.
  Status Str(std::string* out, uint32_t max = kMaxString) {
    uint32_t n;
    TJ_RETURN_IF_ERROR(U32(&n));
    if (n > max) return Status::Error("string of " + std::to_string(n) + " bytes too long");
    out->resize(n);
    return s_.ReadExactly(out->data(), n, d_);
  }
  Status Bytes(void* p, size_t n) { return s_.ReadExactly(p, n, d_); }

 private:
  Socket& s_;
  Deadline d_;
};

std::string Seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

// ---- Authentication.

ChallengeAnswer AnswerChallenge(std::string_view key, const Challenge& challenge,
                                std::string_view task_name) {
  std::string message(reinterpret_cast<const char*>(challenge.data()), challenge.size());
  message.append(task_name);
  return HmacSha256(key, message.data(), message.size());
}

bool VerifyChallengeAnswer(std::string_view key, const Challenge& challenge,
                           std::string_view task_name, const ChallengeAnswer& answer) {
  const ChallengeAnswer expected = AnswerChallenge(key, challenge, task_name);
  return CRYPTO_memcmp(expected.data(), answer.data(), expected.size()) == 0;
}

StatusOr<Challenge> NewChallenge() {
  // From the kernel's CSPRNG (which seeds OpenSSL's too), not RAND_bytes: in a connection's
  // thread RAND_bytes makes per-thread generators that OpenSSL 3.0 sometimes fails to free at
  // thread exit (LeakSanitizer, about 1 in 30 runs of the rendezvous fuzz replay).
  Challenge c{};
  size_t filled = 0;
  while (filled < c.size()) {
    const ssize_t n = ::getrandom(c.data() + filled, c.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::Error(std::string("getrandom failed: cannot make a rendezvous challenge: ") +
                           std::strerror(errno));
    }
    filled += static_cast<size_t>(n);
  }
  return c;
}

// ---- The store itself: a map, a mutex and a condition variable for Wait.

class RendezvousServer::Store final : public KeyValueStore {
 public:
  explicit Store(const std::atomic<bool>* stop) : stop_(stop) {}

  Status Set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      map_[key] = value;
    }
    cv_.notify_all();
    return Status::Ok();
  }

  StatusOr<std::string> Get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return Status::Error("rendezvous key \"" + key + "\" is not set");
    return it->second;
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      std::vector<std::string> missing;
      for (const auto& k : keys) {
        if (!map_.contains(k)) missing.push_back(k);
      }
      if (missing.empty()) return Status::Ok();
      if (stop_->load()) return Status::Error("rendezvous server is shutting down");
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string names;
        for (const auto& k : missing) names += (names.empty() ? "\"" : ", \"") + k + "\"";
        return Status::Error("timed out after " + Seconds(timeout) +
                             " waiting for rendezvous keys " + names);
      }
      // Short slices so that shutdown is noticed without a notify from the destructor.
      cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                  std::chrono::milliseconds(100)));
    }
  }

  void WakeAll() { cv_.notify_all(); }

 private:
  const std::atomic<bool>* stop_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> map_;  // guarded by mu_
};

// ---- Server.

RendezvousServer::RendezvousServer(const RendezvousServerOptions& options)
    : options_(options), store_(std::make_unique<Store>(&stop_)) {}

StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const RendezvousServerOptions& options) {
  std::unique_ptr<RendezvousServer> server(new RendezvousServer(options));
  const std::string where = (options.bind_host.empty() ? std::string("*") : options.bind_host) +
                            ":" + std::to_string(options.port);
  StatusOr<Socket> listener = ListenTcp(options.bind_host, options.port);
  if (!listener.ok()) {
    return listener.status().WithContext("rendezvous server: cannot listen on " + where +
                                         " (is another process using the chief's TF_CONFIG port?)");
  }
  server->listener_ = std::move(listener).value();
  server->port_ = LocalPort(server->listener_);
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

RendezvousServer::~RendezvousServer() {
  stop_.store(true);
  store_->WakeAll();
  if (accept_thread_.joinable()) accept_thread_.join();
  std::lock_guard<std::mutex> lock(connections_mu_);
  for (Connection& c : connections_) c.socket.Shutdown();
  for (Connection& c : connections_) {
    if (c.thread.joinable()) c.thread.join();
  }
}

KeyValueStore& RendezvousServer::local_store() { return *store_; }

void RendezvousServer::ReapFinished() {
  std::lock_guard<std::mutex> lock(connections_mu_);
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->done.load()) {
      it->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void RendezvousServer::AcceptLoop() {
  while (!stop_.load()) {
    StatusOr<Socket> accepted = AcceptTcp(listener_, DeadlineIn(std::chrono::milliseconds(100)));
    ReapFinished();
    if (!accepted.ok()) {
      if (options_.log) options_.log->Warn("rendezvous server: " + accepted.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (!accepted->valid()) continue;
    std::lock_guard<std::mutex> lock(connections_mu_);
    Connection& c = connections_.emplace_back();
    c.socket = std::move(accepted).value();
    c.thread = std::thread([this, &c] { Serve(&c); });
  }
}

void RendezvousServer::Serve(Connection* connection) {
  Socket& socket = connection->socket;
  const std::string peer = socket.PeerName();
  std::string task_name;
  Status status = Handshake(socket, &task_name);
  if (status.ok()) status = HandleRequests(socket);
  if (!status.ok() && !stop_.load() && options_.log != nullptr) {
    options_.log->Warn("rendezvous server: connection from " + peer +
                       (task_name.empty() ? "" : " (\"" + task_name + "\")") + ": " +
                       status.message());
  }
  socket.Shutdown();
  connection->done.store(true);
}

Status RendezvousServer::Handshake(Socket& socket, std::string* task_name) {
  const Deadline deadline = DeadlineIn(options_.io_timeout);
  const bool auth = !options_.key.empty();
  Challenge challenge{};
  if (auth) {
    StatusOr<Challenge> c = NewChallenge();
    if (!c.ok()) return c.status();
    challenge = *c;
  }
  Encoder hello;
  hello.Bytes(kMagic, 4).U8(kVersion).U8(auth ? 1 : 0).Bytes(challenge.data(), challenge.size());
  TJ_RETURN_IF_ERROR(hello.SendTo(socket, deadline).WithContext("sending hello"));

  Decoder in(socket, deadline);
  char magic[4];
  uint8_t has_key = 0;
  ChallengeAnswer answer{};
  Status st = in.Bytes(magic, 4);
  if (st.ok() && std::memcmp(magic, kMagic, 4) != 0) {
    return Status::Error("not a tj-trainer rendezvous client (bad magic); closed");
  }
  if (st.ok()) st = in.Str(task_name, kMaxTaskName);  // "string of N bytes too long"
  if (st.ok()) st = in.U8(&has_key);
  if (st.ok()) st = in.Bytes(answer.data(), answer.size());
  TJ_RETURN_IF_ERROR(st.WithContext("reading the client's hello"));

  if (auth &&
      (has_key == 0 || !VerifyChallengeAnswer(options_.key, challenge, *task_name, answer))) {
    refused_.fetch_add(1);
    Encoder verdict;
    verdict.U8(1).Str(kWrongKeyReason);
    (void)verdict.SendTo(socket, deadline);  // best effort: the peer may be gone already
    return Status::Error(StatusCode::kPermissionDenied,
                         std::string("refused: ") +
                             (has_key ? std::string(kWrongKeyReason)
                                      : "no TJ_RENDEZVOUS_KEY given but the job requires one") +
                             "; connection closed");
  }
  Encoder verdict;
  verdict.U8(0).Str("");
  return verdict.SendTo(socket, deadline).WithContext("sending verdict");
}

Status RendezvousServer::HandleRequests(Socket& socket) {
  while (!stop_.load()) {
    // Idle clients are allowed (they keep the connection for the whole run); once a request
    // starts, it must arrive within io_timeout.
    if (!socket.WaitReadable(DeadlineIn(std::chrono::milliseconds(200)))) continue;
    const Deadline deadline = DeadlineIn(options_.io_timeout);
    Decoder in(socket, deadline);
    uint8_t op = 0;
    Status st = in.U8(&op);
    if (!st.ok()) {
      // The client closed its connection between requests: its normal end (a reset is not,
      // and is logged).
      if (st.code() == StatusCode::kUnavailable) return Status::Ok();
      return st;
    }
    Encoder reply;
    if (op == kSet) {
      std::string key, value;
      TJ_RETURN_IF_ERROR(in.Str(&key));
      TJ_RETURN_IF_ERROR(in.Str(&value));
      TJ_RETURN_IF_ERROR(store_->Set(key, value));
      reply.U8(0);
    } else if (op == kGet) {
      std::string key;
      TJ_RETURN_IF_ERROR(in.Str(&key));
      StatusOr<std::string> value = store_->Get(key);
      reply.U8(value.ok() ? 1 : 0).Str(value.ok() ? *value : "");
    } else if (op == kWait) {
      uint32_t n = 0;
      TJ_RETURN_IF_ERROR(in.U32(&n));
      if (n > kMaxKeys) return Status::Error("too many keys in a wait request");
      std::vector<std::string> keys(n);
      for (auto& k : keys) TJ_RETURN_IF_ERROR(in.Str(&k));
      uint64_t timeout_ms = 0;
      TJ_RETURN_IF_ERROR(in.U64(&timeout_ms));
      timeout_ms = std::min<uint64_t>(timeout_ms, uint64_t{24} * 3600 * 1000);
      Status waited = store_->Wait(keys, std::chrono::milliseconds(timeout_ms));
      reply.U8(waited.ok() ? 0 : 1);
    } else {
      return Status::Error("unknown request " + std::to_string(op) + "; closed");
    }
    TJ_RETURN_IF_ERROR(reply.SendTo(socket, DeadlineIn(options_.io_timeout)));
  }
  return Status::Ok();
}

// ---- Client.

namespace {

// Outcome of one connection attempt: connected, refused for good, or worth retrying.
struct Attempt {
  Socket socket;
  Status status;
  bool permanent = false;
};

Attempt TryConnect(const RendezvousClientOptions& o, const HostPort& chief) {
  Attempt a;
  const Deadline deadline = DeadlineIn(o.io_timeout);
  StatusOr<Socket> s = ConnectTcp(chief.host, chief.port, deadline);
  if (!s.ok()) {
    a.status = s.status();
    return a;
  }
  Decoder in(*s, deadline);
  char magic[4];
  uint8_t version = 0, auth = 0;
  Challenge challenge{};
  Status st = in.Bytes(magic, 4);
  if (st.ok()) st = in.U8(&version);
  if (st.ok()) st = in.U8(&auth);
  if (st.ok()) st = in.Bytes(challenge.data(), challenge.size());
  if (!st.ok()) {
    a.status = st.WithContext("reading the chief's hello");
    return a;
  }
  if (std::memcmp(magic, kMagic, 4) != 0 || version != kVersion) {
    a.status = Status::Error("it does not speak the tj-trainer rendezvous protocol (version " +
                             std::to_string(kVersion) + "); is TF_CONFIG's chief address right?");
    a.permanent = true;
    return a;
  }
  if (auth == 0 && !o.key.empty()) {
    a.status = Status::Error(
        "the chief does not require a rendezvous key but TJ_RENDEZVOUS_KEY is set here; give "
        "every task of the job the same key");
    a.permanent = true;
    return a;
  }
  ChallengeAnswer answer{};
  if (auth != 0 && !o.key.empty()) answer = AnswerChallenge(o.key, challenge, o.task_name);
  Encoder hello;
  hello.Bytes(kMagic, 4)
      .Str(o.task_name)
      .U8(o.key.empty() ? 0 : 1)
      .Bytes(answer.data(), answer.size());
  st = hello.SendTo(*s, deadline);
  uint8_t verdict = 1;
  std::string reason;
  if (st.ok()) st = in.U8(&verdict);
  if (st.ok()) st = in.Str(&reason);
  if (!st.ok()) {
    // A refused peer may see the close before the verdict; report it as refused only when
    // we know (the verdict arrived).
    a.status = st.WithContext("authenticating");
    return a;
  }
  if (verdict != 0) {
    a.status = Status::Error(StatusCode::kPermissionDenied,
                             o.key.empty() ? "no TJ_RENDEZVOUS_KEY set here but the job "
                                             "requires one"
                                           : std::string(kWrongKeyReason));
    a.permanent = true;
    return a;
  }
  a.socket = std::move(s).value();
  return a;
}

}  // namespace

StatusOr<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(
    const RendezvousClientOptions& o) {
  Clock* clock = o.clock != nullptr ? o.clock : RealClock::Get();
  const std::string chief = "chief " + o.chief_address + " (" + o.chief_name + ")";
  StatusOr<HostPort> hp = ParseHostPort(o.chief_address, "rendezvous chief address");
  if (!hp.ok()) return hp.status();
  const auto start = clock->Now();
  auto backoff = std::chrono::milliseconds(50);
  std::string last_error;
  while (true) {
    Attempt a = TryConnect(o, *hp);
    if (a.socket.valid()) {
      return std::unique_ptr<RendezvousClient>(new RendezvousClient(o, std::move(a.socket)));
    }
    if (a.permanent) {
      return a.status.WithContext("rendezvous with " + chief + " refused");
    }
    last_error = a.status.message();
    const auto elapsed = clock->Now() - start;
    if (elapsed >= o.rendezvous_timeout) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(o.rendezvous_timeout - elapsed);
    clock->SleepFor(std::min(backoff, left));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return Status::Error("rendezvous with " + chief + " failed: could not reach it within " +
                       Seconds(o.rendezvous_timeout) + " (last error: " + last_error +
                       "); check that the chief is running and that TF_CONFIG names its "
                       "host:port");
}

Status RendezvousClient::Fail(const std::string& what, const Status& status) {
  socket_.Close();  // the stream is out of step now; later calls fail fast
  return status.WithContext("rendezvous " + what + " with chief " + options_.chief_address + " (" +
                            options_.chief_name + ")");
}

Status RendezvousClient::Set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!socket_.valid()) return Fail("set", Status::Error("connection lost earlier"));
  const Deadline deadline = DeadlineIn(options_.io_timeout);
  Encoder req;
  req.U8(kSet).Str(key).Str(value);
  Status st = req.SendTo(socket_, deadline);
  uint8_t ack;
  if (st.ok()) st = Decoder(socket_, deadline).U8(&ack);
  if (!st.ok()) return Fail("set \"" + key + "\"", st);
  return Status::Ok();
}

StatusOr<std::string> RendezvousClient::Get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!socket_.valid()) return Fail("get", Status::Error("connection lost earlier"));
  const Deadline deadline = DeadlineIn(options_.io_timeout);
  Encoder req;
  req.U8(kGet).Str(key);
  Status st = req.SendTo(socket_, deadline);
  uint8_t found = 0;
  std::string value;
  Decoder in(socket_, deadline);
  if (st.ok()) st = in.U8(&found);
  if (st.ok()) st = in.Str(&value);
  if (!st.ok()) return Fail("get \"" + key + "\"", st);
  if (!found) return Status::Error("rendezvous key \"" + key + "\" is not set");
  return value;
}

Status RendezvousClient::Wait(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!socket_.valid()) return Fail("wait", Status::Error("connection lost earlier"));
  Encoder req;
  req.U8(kWait).U32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) req.Str(k);
  req.U64(static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
  // The server answers by the timeout; allow io_timeout on top for the transfer.
  const Deadline deadline = DeadlineIn(timeout + options_.io_timeout);
  Status st = req.SendTo(socket_, deadline);
  uint8_t result = 1;
  if (st.ok()) st = Decoder(socket_, deadline).U8(&result);
  if (!st.ok()) return Fail("wait", st);
  if (result != 0) {
    std::string names;
    for (const auto& k : keys) names += (names.empty() ? "\"" : ", \"") + k + "\"";
    return Status::Error("timed out after " + Seconds(timeout) + " waiting for rendezvous keys " +
                         names);
  }
  return Status::Ok();
}

// ---- Rendezvous.

RendezvousOptions RendezvousOptionsFor(const TfConfig& config) {
  RendezvousOptions o;
  o.chief_address = config.chief_address();
  o.chief_name = config.TaskNameOfRank(0);
  o.task_name = config.task_name();
  o.is_chief = config.is_chief();
  return o;
}

StatusOr<std::unique_ptr<Rendezvous>> Rendezvous::Join(const RendezvousOptions& o) {
  std::unique_ptr<Rendezvous> r(new Rendezvous());
  if (o.is_chief) {
    StatusOr<HostPort> hp = ParseHostPort(o.chief_address, "rendezvous chief address");
    if (!hp.ok()) return hp.status();
    RendezvousServerOptions so;
    so.bind_host = o.bind_host;
    so.port = hp->port;
    so.key = o.key;
    so.io_timeout = o.io_timeout;
    so.log = o.log;
    StatusOr<std::unique_ptr<RendezvousServer>> server = RendezvousServer::Start(so);
    if (!server.ok()) return server.status();
    r->server_ = std::move(server).value();
    return r;
  }
  RendezvousClientOptions co;
  co.chief_address = o.chief_address;
  co.chief_name = o.chief_name;
  co.task_name = o.task_name;
  co.key = o.key;
  co.rendezvous_timeout = o.rendezvous_timeout;
  co.io_timeout = o.io_timeout;
  co.clock = o.clock;
  StatusOr<std::unique_ptr<RendezvousClient>> client = RendezvousClient::Connect(co);
  if (!client.ok()) return client.status();
  r->client_ = std::move(client).value();
  return r;
}

}  // namespace tj::cluster
