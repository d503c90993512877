#include "trainer/cluster/rendezvous.h"

#include <openssl/crypto.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "common/backoff.h"
#include "common/secure_random.h"
#include "common/sha256.h"
#include "trainer/cluster/handshake_acceptor.h"
#include "trainer/cluster/tf_config.h"

namespace tj::cluster {
namespace {

// Wire format, version 3 (all integers big-endian; str = u32 length + bytes):
//   server hello:   "TJRV" u8 version server_nonce[32]
//   client hello:   "TJRV" u8 version str task_name (<= 256) i64 gang client_nonce[32]
//                   client_proof[32]
//   server verdict: u8 0 server_proof[32]     (accepted; the session starts)
//                 | u8 1 str reason (<= 256)  (refused; the connection is closed)
//                 | u8 2 i64 chief_gang other_gang_proof[32]  (the client proved the key for
//                   another gang than the chief's; closed)
//   then messages both ways, each a frame:  u32 length, body, tag[32] where
//     tag = HMAC(session_key, direction || u64 sequence || body), direction 'C' (client to
//     server) or 'S', sequence counting from 0 per direction.
//   request bodies:  u8 op, then  Set: str key, str value  -> reply u8 0
//                                 Get: str key             -> reply u8 found, str value
//                                 Wait: u32 n, n x str, u64 timeout_ms -> u8 (0 ok, 1 timed out)
constexpr char kMagic[4] = {'T', 'J', 'R', 'V'};
constexpr uint8_t kVersion = 3;
constexpr uint32_t kMaxString = 64u << 20;
constexpr uint32_t kMaxFrame = kMaxString + (1u << 20);
constexpr uint32_t kMaxKeys = 1 << 16;
constexpr uint32_t kMaxTaskName = 256;  // in the client hello, read before authentication
constexpr uint32_t kMaxReason = 256;
constexpr size_t kServerHelloSize = 4 + 1 + 32;
constexpr size_t kMaxClientHello = 4 + 1 + 4 + kMaxTaskName + 8 + 32 + 32;
constexpr char kFromClient = 'C', kFromServer = 'S';
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
  const std::string& bytes() const { return buf_; }
  std::string Take() { return std::move(buf_); }
  Status SendTo(Socket& s, Deadline d) { return s.WriteAll(buf_.data(), buf_.size(), d); }

 private:
  std::string buf_;
};

// Reads fields from bytes already received (a frame's body, a client hello). Every read is
// bounds-checked; `complete` is false when the bytes ran out (more may come).
class Reader {
 public:
  explicit Reader(std::string_view in) : input_(in) {}
  bool U8(uint8_t* v) {
    if (input_.empty()) return Short();
    *v = static_cast<uint8_t>(input_[0]);
    input_.remove_prefix(1);
    return true;
  }
  bool U32(uint32_t* v) {
    if (input_.size() < 4) return Short();
    const auto* b = reinterpret_cast<const unsigned char*>(input_.data());
    *v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    input_.remove_prefix(4);
    return true;
  }
  bool U64(uint64_t* v) {
    uint32_t hi = 0, lo = 0;
    if (!U32(&hi) || !U32(&lo)) return false;
    *v = (uint64_t{hi} << 32) | lo;
    return true;
  }
  // The announced length is checked against `max` before anything is copied.
  bool Str(std::string* out, uint32_t max = kMaxString) {
    uint32_t n = 0;
    if (!U32(&n)) return false;
    if (n > max) {
      too_long_ = n;
      return false;
    }
    if (input_.size() < n) return Short();
    out->assign(input_.data(), n);
    input_.remove_prefix(n);
    return true;
  }
  bool Bytes(void* p, size_t n) {
    if (input_.size() < n) return Short();
    std::memcpy(p, input_.data(), n);
    input_.remove_prefix(n);
    return true;
  }
  bool at_end() const { return input_.empty(); }
  bool short_input() const { return short_; }
  // Why the last read failed, for a message.
  std::string Error() const {
    if (too_long_ > 0) return "string of " + std::to_string(too_long_) + " bytes too long";
    return "message truncated";
  }

 private:
  bool Short() {
    short_ = true;
    return false;
  }
  std::string_view input_;
  bool short_ = false;
  uint32_t too_long_ = 0;
};

std::string Seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

StatusOr<Mac> TranscriptMac(std::string_view key, std::string_view label,
                            const HandshakeTranscript& t) {
  Encoder e;
  e.Str(label)
      .Bytes(t.server_nonce.data(), t.server_nonce.size())
      .Bytes(t.client_nonce.data(), t.client_nonce.size())
      .Str(t.client_task)
      .Str(t.chief_task)
      .U64(static_cast<uint64_t>(t.gang));
  return HmacSha256(key, e.bytes().data(), e.bytes().size());
}

// A message's tag: HMAC(session_key, direction || u64 sequence || body).
StatusOr<Mac> MessageTag(const Mac& session_key, char direction, uint64_t sequence,
                         std::string_view body) {
  Encoder signed_part;
  signed_part.U8(static_cast<uint8_t>(direction)).U64(sequence).Bytes(body.data(), body.size());
  StatusOr<Mac> tag = HmacSha256(
      std::string_view(reinterpret_cast<const char*>(session_key.data()), session_key.size()),
      signed_part.bytes().data(), signed_part.bytes().size());
  if (!tag.ok()) return tag.status().WithContext("authenticating a rendezvous message");
  return tag;
}

// A frame: u32 length, body, MessageTag.
StatusOr<std::string> Seal(const Mac& session_key, char direction, uint64_t sequence,
                           std::string_view body) {
  StatusOr<Mac> tag = MessageTag(session_key, direction, sequence, body);
  if (!tag.ok()) return tag.status();
  Encoder frame;
  frame.U32(static_cast<uint32_t>(body.size()))
      .Bytes(body.data(), body.size())
      .Bytes(tag->data(), tag->size());
  return frame.Take();
}

// Reads one frame and checks its tag; the body, or an error (a bad tag: "not authenticated").
StatusOr<std::string> Open(Socket& socket, const Mac& session_key, char direction,
                           uint64_t sequence, Deadline deadline) {
  unsigned char len_bytes[4];
  TJ_RETURN_IF_ERROR(socket.ReadExactly(len_bytes, 4, deadline));
  const uint32_t n = (uint32_t{len_bytes[0]} << 24) | (uint32_t{len_bytes[1]} << 16) |
                     (uint32_t{len_bytes[2]} << 8) | len_bytes[3];
  if (n > kMaxFrame) {
    return Status::Error("message of " + std::to_string(n) + " bytes too long");
  }
  std::string body(n, '\0');
  TJ_RETURN_IF_ERROR(socket.ReadExactly(body.data(), n, deadline));
  Mac tag{};
  TJ_RETURN_IF_ERROR(socket.ReadExactly(tag.data(), tag.size(), deadline));
  StatusOr<Mac> expected = MessageTag(session_key, direction, sequence, body);
  if (!expected.ok()) return expected.status();
  if (!MacEquals(*expected, tag)) {
    return Status::Error(StatusCode::kPermissionDenied,
                         "message not authenticated by the session's key (tampered with, "
                         "replayed or injected); closed");
  }
  return body;
}

Status NoKeyError(const std::string& who) {
  return Status::Error(StatusCode::kPermissionDenied,
                       who +
                           ": TJ_RENDEZVOUS_KEY is empty; the rendezvous requires the job's "
                           "key on every task (the operator sets it from the Secret "
                           "<job>-rendezvous-<uid>; by hand, give every task the same key)");
}

}  // namespace

// ---- Authentication.

StatusOr<Mac> ClientProof(std::string_view key, const HandshakeTranscript& t) {
  return TranscriptMac(key, "TJRV3 client proof", t);
}

StatusOr<Mac> ServerProof(std::string_view key, const HandshakeTranscript& t) {
  return TranscriptMac(key, "TJRV3 server proof", t);
}

StatusOr<Mac> SessionKey(std::string_view key, const HandshakeTranscript& t) {
  return TranscriptMac(key, "TJRV3 session key", t);
}

StatusOr<Mac> OtherGangProof(std::string_view key, const HandshakeTranscript& t) {
  return TranscriptMac(key, "TJRV3 other gang", t);
}

bool MacEquals(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

StatusOr<Nonce> NewNonce() {
  // From the kernel's CSPRNG (which seeds OpenSSL's too), not RAND_bytes: in a connection's
  // thread RAND_bytes makes per-thread generators that OpenSSL 3.0 sometimes fails to free at
  // thread exit (LeakSanitizer, about 1 in 30 runs of the rendezvous fuzz replay).
  Nonce c{};
  if (Status s = SecureRandomBytes(c.data(), c.size()); !s.ok()) {
    return s.WithContext("cannot make a rendezvous nonce");
  }
  return c;
}

// ---- The store itself: a map, a mutex and a condition variable for Wait.

class RendezvousServer::Store final : public KeyValueStore {
 public:
  explicit Store(const std::atomic<bool>* stop) : stop_(stop) {}

  Status Set(const std::string& key, const std::string& value) override {
    {
      MutexLock lock(mu_);
      map_[key] = value;
    }
    cv_.notify_all();
    return Status::Ok();
  }

  StatusOr<std::string> Get(const std::string& key) override {
    MutexLock lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return Status::Error("rendezvous key \"" + key + "\" is not set");
    return it->second;
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock lock(mu_);
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
  Mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, std::string> map_ TJ_GUARDED_BY(mu_);
};

// ---- Server.

// An authenticated session, served by a thread of its own.
struct RendezvousServer::Session {
  Socket socket;
  std::string peer;
  std::string task;
  Mac key{};
  std::thread thread;
  std::atomic<bool> done{false};
};

namespace {

// A peer-supplied name, made safe for a log line.
std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

void SendRefusal(Socket& socket, std::string_view reason) {
  Encoder verdict;
  verdict.U8(1).Str(reason);
  (void)SendNow(socket, verdict.bytes());  // best effort: the peer may be gone already
}

}  // namespace

RendezvousServer::RendezvousServer(const RendezvousServerOptions& options)
    : options_(options), store_(std::make_unique<Store>(&stop_)) {}

StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const RendezvousServerOptions& options) {
  if (options.key.empty()) return NoKeyError("rendezvous server");
  std::unique_ptr<RendezvousServer> server(new RendezvousServer(options));
  // Waiting handshakes hold a descriptor each: leave room for everything else the process
  // opens (Gloo's mesh, files, the sessions).
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    const long room = (static_cast<long>(nofile.rlim_cur) - 128) / 2;
    server->options_.max_pending =
        static_cast<int>(std::min<long>(options.max_pending, std::max<long>(room, 8)));
  }
  server->options_.max_pending = std::max(server->options_.max_pending, 1);
  const std::string where = (options.bind_host.empty() ? std::string("*") : options.bind_host) +
                            ":" + std::to_string(options.port);
  StatusOr<Socket> listener = ListenTcp(options.bind_host, options.port);
  if (!listener.ok()) {
    return listener.status().WithContext("rendezvous server: cannot listen on " + where +
                                         " (is another process using the chief's TF_CONFIG port?)");
  }
  server->listener_ = std::move(listener).value();
  server->port_ = LocalPort(server->listener_);
  try {
    server->loop_thread_ = std::thread([s = server.get()] { s->Loop(); });
  } catch (const std::system_error& e) {
    return Status::Error(std::string("rendezvous server: cannot start its thread: ") + e.what());
  }
  return server;
}

RendezvousServer::~RendezvousServer() {
  stop_.store(true);
  store_->WakeAll();
  if (loop_thread_.joinable()) loop_thread_.join();
  MutexLock lock(sessions_mu_);
  for (Session& s : sessions_) s.socket.Shutdown();
  for (Session& s : sessions_) {
    if (s.thread.joinable()) s.thread.join();
  }
}

KeyValueStore& RendezvousServer::local_store() { return *store_; }

int RendezvousServer::session_count() {
  MutexLock lock(sessions_mu_);
  return static_cast<int>(
      std::count_if(sessions_.begin(), sessions_.end(), [](const Session& s) { return !s.done; }));
}

void RendezvousServer::ReapFinished() {
  MutexLock lock(sessions_mu_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->done.load()) {
      it->thread.join();
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
}

void RendezvousServer::WarnUnauthenticated(const std::string& message) {
  if (options_.log == nullptr) return;
  constexpr int kLinesPerMinute = 20;
  const auto now = std::chrono::steady_clock::now();
  if (now - warn_window_start_ >= std::chrono::minutes(1)) {
    if (suppressed_in_window_ > 0) {
      options_.log->Warn("rendezvous server: " + std::to_string(suppressed_in_window_) +
                         " more unauthenticated connections closed in the last minute (not "
                         "logged one by one)");
    }
    warn_window_start_ = now;
    warned_in_window_ = 0;
    suppressed_in_window_ = 0;
  }
  if (warned_in_window_ < kLinesPerMinute) {
    ++warned_in_window_;
    options_.log->Warn("rendezvous server: " + message);
  } else {
    ++suppressed_in_window_;
  }
}

void RendezvousServer::Loop() {
  HandshakeAcceptor acceptor(
      &listener_, HandshakeAcceptorOptions{options_.handshake_timeout, options_.max_pending, 256},
      HandshakeProtocol{[](const Nonce& nonce) {
                          Encoder hello;
                          hello.Bytes(kMagic, 4).U8(kVersion).Bytes(nonce.data(), nonce.size());
                          return hello.bytes();
                        },
                        [this](PendingHandshake& p) {
                          return Advance(p) ? HandshakeProtocol::Step::kFinished
                                            : HandshakeProtocol::Step::kWaiting;
                        },
                        [this](const PendingHandshake* p, HandshakeDrop why,
                               const std::string& detail) { Dropped(p, why, detail); }});
  while (!stop_.load()) {
    ReapFinished();
    acceptor.ExpireDue();
    pending_now_.store(acceptor.pending());
    if (Status served = acceptor.ServeOnce(Deadline::max(), &stop_); !served.ok()) {
      if (options_.log) options_.log->Warn("rendezvous server: " + served.message());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  pending_now_.store(0);
}

void RendezvousServer::Dropped(const PendingHandshake* p, HandshakeDrop why,
                               const std::string& detail) {
  switch (why) {
    case HandshakeDrop::kTimedOut:
      dropped_.fetch_add(1);
      WarnUnauthenticated("connection from " + p->peer + ": no handshake within " +
                          Seconds(options_.handshake_timeout) + "; closed");
      return;
    case HandshakeDrop::kPushedOut:
      WarnUnauthenticated("connection from " + p->peer + ": closed unauthenticated, " +
                          std::to_string(options_.max_pending) +
                          " handshakes were waiting (a flood?)");
      dropped_.fetch_add(1);
      return;
    case HandshakeDrop::kOutOfDescriptors:
      WarnUnauthenticated(detail);
      if (p != nullptr) dropped_.fetch_add(1);
      return;
    case HandshakeDrop::kNoNonce:
      if (options_.log) options_.log->Warn("rendezvous server: " + detail);
      return;
    case HandshakeDrop::kGoneBeforeHello:
      dropped_.fetch_add(1);
      return;
  }
}

bool RendezvousServer::Advance(PendingHandshake& p) {
  char buf[kMaxClientHello];
  const size_t room = kMaxClientHello - p.received.size();
  const ssize_t n = ::recv(p.socket.fd(), buf, std::max<size_t>(room, 1), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  auto drop = [&](const std::string& why) {
    dropped_.fetch_add(1);
    WarnUnauthenticated("connection from " + p.peer + ": " + why + "; closed");
    return true;
  };
  if (n == 0) return drop("closed before completing its handshake");
  if (n < 0) return drop(std::string("read: ") + std::strerror(errno));
  if (room == 0) return drop("sent more than a hello before the verdict");
  p.received.append(buf, static_cast<size_t>(n));

  Reader in(p.received);
  char magic[4];
  uint8_t version = 0;
  std::string task;
  uint64_t gang_bits = 0;
  Nonce client_nonce{};
  Mac proof{};
  bool ok = in.Bytes(magic, 4);
  if (ok && std::memcmp(magic, kMagic, 4) != 0) {
    return drop("not a tj-trainer rendezvous client (bad magic)");
  }
  ok = ok && in.U8(&version);
  if (ok && version != kVersion) {
    return drop("speaks rendezvous protocol version " + std::to_string(version) +
                ", this chief version " + std::to_string(kVersion));
  }
  ok = ok && in.Str(&task, kMaxTaskName) && in.U64(&gang_bits) &&
       in.Bytes(client_nonce.data(), client_nonce.size()) && in.Bytes(proof.data(), proof.size());
  if (!ok) {
    if (in.short_input()) return false;  // the rest of the hello is still to come
    return drop("reading the client's hello: " + in.Error());
  }
  if (!in.at_end()) return drop("sent more than a hello before the verdict");

  const std::string who = "connection from " + p.peer + " (\"" + Printable(task) + "\")";
  const auto client_gang = static_cast<int64_t>(gang_bits);
  if (client_gang != options_.gang)
    return RefuseOtherGang(p, who, task, client_nonce, client_gang, proof);
  const HandshakeTranscript t{p.nonce, client_nonce, task, options_.chief_task, options_.gang};
  StatusOr<Mac> expected = ClientProof(options_.key, t);
  StatusOr<Mac> server_proof = ServerProof(options_.key, t);
  StatusOr<Mac> session_key = SessionKey(options_.key, t);
  for (const StatusOr<Mac>* m : {&expected, &server_proof, &session_key}) {
    if (!m->ok()) {  // fail closed: nobody is accepted without a computed proof
      SendRefusal(p.socket, "the chief could not compute an HMAC");
      if (options_.log) {
        options_.log->Warn("rendezvous server: " + who + ": " + m->status().message() +
                           "; refused");
      }
      return true;
    }
  }
  if (!MacEquals(*expected, proof)) return RefuseWrongKey(p, who);
  MutexLock lock(sessions_mu_);
  if (static_cast<int>(sessions_.size()) >= options_.max_sessions) {
    SendRefusal(p.socket, "the chief has " + std::to_string(options_.max_sessions) +
                              " sessions open already; try again");
    if (options_.log) {
      options_.log->Warn("rendezvous server: " + who + ": refused, " +
                         std::to_string(options_.max_sessions) + " sessions open already");
    }
    return true;
  }
  Encoder verdict;
  verdict.U8(0).Bytes(server_proof->data(), server_proof->size());
  if (!SendNow(p.socket, verdict.bytes())) return drop("could not send the verdict");
  Session& s = sessions_.emplace_back();
  s.socket = std::move(p.socket);
  s.peer = p.peer;
  s.task = Printable(task);
  s.key = *session_key;
  try {
    s.thread = std::thread([this, &s] { Serve(&s); });
  } catch (const std::system_error& e) {
    if (options_.log) {
      options_.log->Warn("rendezvous server: " + who + ": cannot start a thread for its session (" +
                         e.what() + "); closed, the peer retries");
    }
    sessions_.pop_back();
  }
  return true;
}

bool RendezvousServer::RefuseWrongKey(PendingHandshake& p, const std::string& who) {
  refused_.fetch_add(1);
  SendRefusal(p.socket, kWrongKeyReason);
  WarnUnauthenticated(who + ": refused: " + std::string(kWrongKeyReason) + "; connection closed");
  return true;
}

bool RendezvousServer::RefuseOtherGang(PendingHandshake& p, const std::string& who,
                                       const std::string& task, const Nonce& client_nonce,
                                       int64_t client_gang, const Mac& proof) {
  HandshakeTranscript t{p.nonce, client_nonce, task, options_.chief_task, client_gang};
  StatusOr<Mac> expected = ClientProof(options_.key, t);
  if (!expected.ok() || !MacEquals(*expected, proof)) return RefuseWrongKey(p, who);
  // A holder of the key, of another gang: told the chief's gang, with a proof over it, so
  // that a task of an older gang can stop at once.
  t.gang = options_.gang;
  StatusOr<Mac> chief_proof = OtherGangProof(options_.key, t);
  refused_.fetch_add(1);
  if (!chief_proof.ok()) {
    SendRefusal(p.socket, "the chief could not compute an HMAC");
    return true;
  }
  Encoder verdict;
  verdict.U8(2)
      .U64(static_cast<uint64_t>(options_.gang))
      .Bytes(chief_proof->data(), chief_proof->size());
  (void)SendNow(p.socket, verdict.bytes());
  WarnUnauthenticated(who + ": refused: it is of gang " + std::to_string(client_gang) +
                      ", this chief serves gang " + std::to_string(options_.gang) +
                      "; connection closed");
  return true;
}

void RendezvousServer::Serve(Session* session) {
  Status status = HandleRequests(*session);
  if (!status.ok() && !stop_.load() && options_.log != nullptr) {
    options_.log->Warn("rendezvous server: session of " + session->peer + " (\"" + session->task +
                       "\"): " + status.message());
  }
  session->socket.Shutdown();
  session->done.store(true);
}

Status RendezvousServer::HandleRequests(Session& session) {
  Socket& socket = session.socket;
  uint64_t received = 0, sent = 0;
  while (!stop_.load()) {
    // Idle clients are allowed (they keep the session for the whole run); once a request
    // starts, it must arrive within io_timeout.
    if (!socket.WaitReadable(DeadlineIn(std::chrono::milliseconds(200)))) continue;
    const Deadline deadline = DeadlineIn(options_.io_timeout);
    StatusOr<std::string> body = Open(socket, session.key, kFromClient, received++, deadline);
    if (!body.ok()) {
      // The client closed its session between requests: its normal end (a reset is not, and
      // is logged).
      if (body.status().code() == StatusCode::kUnavailable) return Status::Ok();
      return body.status();
    }
    Reader in(*body);
    auto malformed = [&] { return Status::Error("malformed request: " + in.Error() + "; closed"); };
    uint8_t op = 0;
    if (!in.U8(&op)) return malformed();
    Encoder reply;
    if (op == kSet) {
      std::string key, value;
      if (!in.Str(&key) || !in.Str(&value)) return malformed();
      TJ_RETURN_IF_ERROR(store_->Set(key, value));
      reply.U8(0);
    } else if (op == kGet) {
      std::string key;
      if (!in.Str(&key)) return malformed();
      StatusOr<std::string> value = store_->Get(key);
      reply.U8(value.ok() ? 1 : 0).Str(value.ok() ? *value : "");
    } else if (op == kWait) {
      uint32_t n = 0;
      if (!in.U32(&n)) return malformed();
      if (n > kMaxKeys) return Status::Error("too many keys in a wait request");
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < n; ++i) {
        if (!in.Str(&keys.emplace_back())) return malformed();
      }
      uint64_t timeout_ms = 0;
      if (!in.U64(&timeout_ms)) return malformed();
      timeout_ms = std::min<uint64_t>(timeout_ms, uint64_t{24} * 3600 * 1000);
      Status waited = store_->Wait(keys, std::chrono::milliseconds(timeout_ms));
      reply.U8(waited.ok() ? 0 : 1);
    } else {
      return Status::Error("unknown request " + std::to_string(op) + "; closed");
    }
    if (!in.at_end()) return Status::Error("request longer than its fields; closed");
    StatusOr<std::string> frame = Seal(session.key, kFromServer, sent++, reply.bytes());
    if (!frame.ok()) return frame.status();
    TJ_RETURN_IF_ERROR(
        socket.WriteAll(frame->data(), frame->size(), DeadlineIn(options_.io_timeout)));
  }
  return Status::Ok();
}

// ---- Client.

namespace {

// Outcome of one connection attempt: an authenticated session, or why not (all retried).
struct Attempt {
  Socket socket;
  Mac session_key{};
  Status status;
  bool replaced = false;  // a chief of a newer gang refused this task: no retry
};

// After verdict 2: the chief's gang and its proof; why this task was refused. *replaced when
// the chief proved it serves a newer gang (this task must not retry).
Status ReadOtherGang(Socket& s, const RendezvousClientOptions& o, HandshakeTranscript t,
                     Deadline deadline, bool* replaced) {
  unsigned char bytes[8 + 32];
  if (Status st = s.ReadExactly(bytes, sizeof bytes, deadline); !st.ok()) {
    return st.WithContext("reading the chief's gang");
  }
  Reader in(std::string_view(reinterpret_cast<const char*>(bytes), sizeof bytes));
  uint64_t gang_bits = 0;
  Mac proof{};
  (void)in.U64(&gang_bits);
  (void)in.Bytes(proof.data(), proof.size());
  t.gang = static_cast<int64_t>(gang_bits);
  StatusOr<Mac> expected = OtherGangProof(o.key, t);
  const std::string mine =
      "this task is of gang " + std::to_string(o.gang) + " (TJ_RESTART_COUNT), ";
  if (!expected.ok() || !MacEquals(*expected, proof)) {
    return Status::Error(StatusCode::kPermissionDenied,
                         "an answer at the chief's address named another gang without proving "
                         "it holds TJ_RENDEZVOUS_KEY (an impostor?)");
  }
  if (t.gang > o.gang) {
    *replaced = true;
    return Status::Error(StatusCode::kPermissionDenied,
                         mine + "the chief serves gang " + std::to_string(t.gang) +
                             ": this task belongs to a gang that was replaced and cannot join "
                             "the new one (the operator deletes it)");
  }
  return Status::Error(StatusCode::kPermissionDenied,
                       mine + "the chief at that address serves older gang " +
                           std::to_string(t.gang) +
                           " (still running; waiting for the chief of "
                           "this gang)");
}

Attempt TryConnect(const RendezvousClientOptions& o, const HostPort& chief) {
  Attempt a;
  const Deadline deadline = DeadlineIn(o.io_timeout);
  StatusOr<Socket> s = ConnectTcp(chief.host, chief.port, deadline);
  if (!s.ok()) {
    a.status = s.status();
    return a;
  }
  unsigned char hello_bytes[kServerHelloSize];
  if (Status st = s->ReadExactly(hello_bytes, sizeof hello_bytes, deadline); !st.ok()) {
    a.status = st.WithContext("reading the chief's hello");
    return a;
  }
  HandshakeTranscript t;
  t.client_task = o.task_name;
  t.chief_task = o.chief_name;
  t.gang = o.gang;
  if (std::memcmp(hello_bytes, kMagic, 4) != 0 || hello_bytes[4] != kVersion) {
    a.status = Status::Error("it does not speak the tj-trainer rendezvous protocol (version " +
                             std::to_string(kVersion) +
                             "); is TF_CONFIG's chief address right, and every task of the job "
                             "on the same tj-trainer image?");
    return a;
  }
  std::memcpy(t.server_nonce.data(), hello_bytes + 5, t.server_nonce.size());
  StatusOr<Nonce> nonce = NewNonce();
  if (!nonce.ok()) {
    a.status = nonce.status();
    return a;
  }
  t.client_nonce = *nonce;
  StatusOr<Mac> proof = ClientProof(o.key, t);
  StatusOr<Mac> expected_server_proof = ServerProof(o.key, t);
  StatusOr<Mac> session_key = SessionKey(o.key, t);
  for (const StatusOr<Mac>* m : {&proof, &expected_server_proof, &session_key}) {
    if (!m->ok()) {
      a.status = m->status();
      return a;
    }
  }
  Encoder hello;
  hello.Bytes(kMagic, 4)
      .U8(kVersion)
      .Str(o.task_name)
      .U64(static_cast<uint64_t>(o.gang))
      .Bytes(t.client_nonce.data(), t.client_nonce.size())
      .Bytes(proof->data(), proof->size());
  Status st = hello.SendTo(*s, deadline);
  uint8_t verdict = 1;
  if (st.ok()) st = s->ReadExactly(&verdict, 1, deadline);
  if (!st.ok()) {
    // A refused peer may see the close before the verdict.
    a.status = st.WithContext("authenticating");
    return a;
  }
  if (verdict == 2) {
    a.status = ReadOtherGang(*s, o, t, deadline, &a.replaced);
    return a;
  }
  if (verdict != 0) {
    unsigned char len_bytes[4];
    std::string reason = "no reason given";
    if (s->ReadExactly(len_bytes, 4, deadline).ok()) {
      const uint32_t n = (uint32_t{len_bytes[0]} << 24) | (uint32_t{len_bytes[1]} << 16) |
                         (uint32_t{len_bytes[2]} << 8) | len_bytes[3];
      std::string r(std::min(n, kMaxReason), '\0');
      if (n <= kMaxReason && s->ReadExactly(r.data(), r.size(), deadline).ok())
        reason = Printable(r);
    }
    a.status = Status::Error(StatusCode::kPermissionDenied, reason);
    return a;
  }
  Mac server_proof{};
  st = s->ReadExactly(server_proof.data(), server_proof.size(), deadline);
  if (!st.ok()) {
    a.status = st.WithContext("reading the chief's proof");
    return a;
  }
  if (!MacEquals(server_proof, *expected_server_proof)) {
    a.status = Status::Error(StatusCode::kPermissionDenied,
                             "the chief did not prove it holds TJ_RENDEZVOUS_KEY (an impostor at "
                             "its address, or a chief with another key)");
    return a;
  }
  a.socket = std::move(s).value();
  a.session_key = *session_key;
  return a;
}

}  // namespace

StatusOr<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(
    const RendezvousClientOptions& o) {
  if (o.key.empty()) return NoKeyError("rendezvous with chief " + o.chief_address);
  Clock* clock = o.clock != nullptr ? o.clock : RealClock::Get();
  const std::string chief = "chief " + o.chief_address + " (" + o.chief_name + ")";
  StatusOr<HostPort> hp = ParseHostPort(o.chief_address, "rendezvous chief address");
  if (!hp.ok()) return hp.status();
  const auto start = clock->Now();
  ExponentialBackoff backoff(std::chrono::milliseconds(50), std::chrono::seconds(1));
  Status last, refusal;  // the last error, and the last refusal (the more telling one)
  while (true) {
    Attempt a = TryConnect(o, *hp);
    if (a.socket.valid()) {
      return std::unique_ptr<RendezvousClient>(
          new RendezvousClient(o, std::move(a.socket), a.session_key));
    }
    if (a.replaced) {
      return Status::Error(StatusCode::kPermissionDenied,
                           "rendezvous with " + chief + " refused: " + a.status.message());
    }
    // Everything is retried: a refusal or a failed proof comes from whoever answers at the
    // chief's address, which may be an impostor or a chief of an older gang; the real one may
    // be there on the next try.
    last = a.status;
    if (last.code() == StatusCode::kPermissionDenied) refusal = last;
    const auto elapsed = clock->Now() - start;
    if (elapsed >= o.rendezvous_timeout) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(o.rendezvous_timeout - elapsed);
    clock->SleepFor(std::min<Clock::Duration>(backoff.Next(), left));
  }
  if (!refusal.ok()) {
    return Status::Error(StatusCode::kDeadlineExceeded,
                         "rendezvous with " + chief + " refused: " + refusal.message() +
                             " (retried for " + Seconds(o.rendezvous_timeout) +
                             "); check that every task of the job has the same "
                             "TJ_RENDEZVOUS_KEY");
  }
  return Status::Error(StatusCode::kDeadlineExceeded,
                       "rendezvous with " + chief + " failed: could not reach it within " +
                           Seconds(o.rendezvous_timeout) + " (last error: " + last.message() +
                           "); check that the chief is running and that TF_CONFIG names its "
                           "host:port");
}

Status RendezvousClient::Fail(const std::string& what, const Status& status) {
  socket_.Close();  // the stream is out of step now; later calls fail fast
  return status.WithContext("rendezvous " + what + " with chief " + options_.chief_address + " (" +
                            options_.chief_name + ")");
}

StatusOr<std::string> RendezvousClient::Exchange(const std::string& what,
                                                 const std::string& request, Deadline deadline) {
  if (!socket_.valid()) return Fail(what, Status::Error("connection lost earlier"));
  StatusOr<std::string> frame = Seal(session_key_, kFromClient, sent_++, request);
  if (!frame.ok()) return Fail(what, frame.status());
  if (Status st = socket_.WriteAll(frame->data(), frame->size(), deadline); !st.ok()) {
    return Fail(what, st);
  }
  StatusOr<std::string> reply = Open(socket_, session_key_, kFromServer, received_++, deadline);
  if (!reply.ok()) return Fail(what, reply.status());
  return reply;
}

Status RendezvousClient::Set(const std::string& key, const std::string& value) {
  MutexLock lock(mu_);
  const std::string what = "set \"" + key + "\"";
  Encoder req;
  req.U8(kSet).Str(key).Str(value);
  StatusOr<std::string> reply = Exchange(what, req.bytes(), DeadlineIn(options_.io_timeout));
  if (!reply.ok()) return reply.status();
  Reader in(*reply);
  uint8_t ack = 1;
  if (!in.U8(&ack) || !in.at_end() || ack != 0) return Fail(what, Status::Error("bad reply"));
  return Status::Ok();
}

StatusOr<std::string> RendezvousClient::Get(const std::string& key) {
  MutexLock lock(mu_);
  const std::string what = "get \"" + key + "\"";
  Encoder req;
  req.U8(kGet).Str(key);
  StatusOr<std::string> reply = Exchange(what, req.bytes(), DeadlineIn(options_.io_timeout));
  if (!reply.ok()) return reply.status();
  Reader in(*reply);
  uint8_t found = 0;
  std::string value;
  if (!in.U8(&found) || !in.Str(&value) || !in.at_end()) {
    return Fail(what, Status::Error("bad reply"));
  }
  if (!found) return Status::Error("rendezvous key \"" + key + "\" is not set");
  return value;
}

Status RendezvousClient::Wait(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  Encoder req;
  req.U8(kWait).U32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) req.Str(k);
  req.U64(static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
  // The server answers by the timeout; allow io_timeout on top for the transfer.
  StatusOr<std::string> reply =
      Exchange("wait", req.bytes(), DeadlineIn(timeout + options_.io_timeout));
  if (!reply.ok()) return reply.status();
  Reader in(*reply);
  uint8_t result = 1;
  if (!in.U8(&result) || !in.at_end()) return Fail("wait", Status::Error("bad reply"));
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
  o.collective_size = config.collective_size();
  return o;
}

StatusOr<std::unique_ptr<Rendezvous>> Rendezvous::Join(const RendezvousOptions& o) {
  if (o.key.empty()) {
    // No fail-open: a collective without the job's key would let anyone on the network join.
    return Status::Error(
        StatusCode::kPermissionDenied,
        "TJ_RENDEZVOUS_KEY is empty, but this collective has " + std::to_string(o.collective_size) +
            " members: each must prove it holds the job's key to join (the operator sets it "
            "from the Secret <job>-rendezvous-<uid>; when starting tasks by hand, give every task "
            "the "
            "same TJ_RENDEZVOUS_KEY)");
  }
  std::unique_ptr<Rendezvous> r(new Rendezvous());
  if (o.is_chief) {
    StatusOr<HostPort> hp = ParseHostPort(o.chief_address, "rendezvous chief address");
    if (!hp.ok()) return hp.status();
    RendezvousServerOptions so;
    so.bind_host = o.bind_host;
    so.port = hp->port;
    so.key = o.key;
    so.chief_task = o.chief_name;
    so.gang = o.gang;
    so.io_timeout = o.io_timeout;
    so.handshake_timeout = o.io_timeout;
    // Room for every peer of the largest collective, twice (a peer's reconnect may overlap
    // its old session's end).
    so.max_sessions = std::max(so.max_sessions, 2 * o.collective_size);
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
  co.gang = o.gang;
  co.rendezvous_timeout = o.rendezvous_timeout;
  co.io_timeout = o.io_timeout;
  co.clock = o.clock;
  StatusOr<std::unique_ptr<RendezvousClient>> client = RendezvousClient::Connect(co);
  if (!client.ok()) return client.status();
  r->client_ = std::move(client).value();
  return r;
}

}  // namespace tj::cluster
