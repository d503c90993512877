#include "trainer/cluster/rendezvous/rendezvous_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <system_error>
#include <vector>

#include "trainer/cluster/rendezvous/sealed_stream.h"

namespace tj::cluster {

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
    if (it == map_.end()) return KeyNotSet(key);
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
      if (std::chrono::steady_clock::now() >= deadline) return KeysTimedOut(missing, timeout);
      // Short slices so that shutdown is noticed without a notify from the destructor.
      cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                  std::chrono::milliseconds(100)));
    }
  }

  // The reply to a session's request.
  std::string Answer(const Request& request) {
    switch (request.op) {
      case Op::kSet:
        (void)Set(request.key, request.value);  // never fails
        return SetReply();
      case Op::kGet:
        return GetReply(Get(request.key));
      case Op::kWait:
        return WaitReply(Wait(request.keys, request.timeout).ok());
    }
    return SetReply();  // ParseRequest gives no other op
  }

  void WakeAll() { cv_.notify_all(); }

 private:
  const std::atomic<bool>* stop_;
  Mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, std::string> map_ TJ_GUARDED_BY(mu_);
};

// An authenticated session, served by a thread of its own.
struct RendezvousServer::Session {
  SealedStream stream;
  std::string peer;
  std::string task;
  std::thread thread;
  std::atomic<bool> done{false};
};

RendezvousServer::RendezvousServer(const RendezvousServerOptions& options)
    : options_(options), store_(std::make_unique<Store>(&stop_)) {}

StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const RendezvousServerOptions& options) {
  TJ_RETURN_IF_ERROR(RequireJobKey(options.identity, "rendezvous server"));
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
  RendezvousServer* s = server.get();
  s->acceptor_ = std::make_unique<HandshakeAcceptor>(
      &s->listener_,
      HandshakeAcceptorOptions{s->options_.handshake_timeout, s->options_.max_pending, 256,
                               s->options_.log, "rendezvous server", 20},
      HandshakeProtocol{RendezvousServerHello, kMaxRendezvousClientHello,
                        [s](PendingHandshake& p) { return s->Judge(p); }});
  try {
    server->loop_thread_ = std::thread([s] { s->Loop(); });
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
  for (Session& s : sessions_) s.stream.socket().Shutdown();
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

void RendezvousServer::Loop() {
  while (!stop_.load()) {
    ReapFinished();
    acceptor_->ExpireDue();
    pending_now_.store(acceptor_->pending());
    if (Status served = acceptor_->ServeOnce(Deadline::max(), &stop_); !served.ok()) {
      if (options_.log) options_.log->Warn("rendezvous server: " + served.message());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  pending_now_.store(0);
}

HandshakeStep RendezvousServer::Judge(PendingHandshake& p) {
  const ClientHelloCheck c = CheckRendezvousClientHello(p.received);
  if (!c.refusal.ok()) return HandshakeStep::Dropped(c.refusal.message());
  if (!c.complete) return HandshakeStep::Waiting();
  const RendezvousClientHello& hello = c.hello;
  const std::string claimed = "(\"" + Printable(hello.task) + "\")";
  const GangIdentity& self = options_.identity;
  if (hello.gang != self.gang) return RefuseOtherGang(p, hello, claimed);
  const HandshakeTranscript t{p.nonce, hello.client_nonce, hello.task, options_.chief_task,
                              self.gang};
  StatusOr<Mac> expected = ClientProof(self.job_key, t);
  StatusOr<Mac> server_proof = ServerProof(self.job_key, t);
  StatusOr<Mac> session_key = SessionKey(self.job_key, t);
  for (const StatusOr<Mac>* m : {&expected, &server_proof, &session_key}) {
    if (!m->ok()) {  // fail closed: nobody is accepted without a computed proof
      return TurnAway(p, claimed, "the chief could not compute an HMAC", m->status().message());
    }
  }
  if (!MacEquals(*expected, hello.proof)) return RefuseWrongKey(p, claimed);
  MutexLock lock(sessions_mu_);
  if (static_cast<int>(sessions_.size()) >= options_.max_sessions) {
    const std::string open = std::to_string(options_.max_sessions) + " sessions open already";
    return TurnAway(p, claimed, "the chief has " + open + "; try again", open);
  }
  if (!SendNow(p.socket, AcceptedVerdict(*server_proof))) {
    return HandshakeStep::Dropped("could not send the verdict");
  }
  StartSession(p, hello.task, *session_key);
  return HandshakeStep::Done();
}

HandshakeStep RendezvousServer::TurnAway(PendingHandshake& p, const std::string& claimed,
                                         const std::string& reason, const std::string& why) {
  (void)SendNow(p.socket, RefusedVerdict(reason));  // best effort: the peer may be gone already
  if (options_.log) {
    options_.log->Warn("rendezvous server: connection from " + p.peer + " " + claimed +
                       ": refused: " + why);
  }
  return HandshakeStep::Done();
}

void RendezvousServer::StartSession(PendingHandshake& p, const std::string& task,
                                    const Mac& session_key) {
  Session& s = sessions_.emplace_back();
  s.stream = SealedStream(std::move(p.socket), session_key, SealedStream::End::kServer);
  s.peer = p.peer;
  s.task = Printable(task);
  try {
    s.thread = std::thread([this, &s] { Serve(&s); });
  } catch (const std::system_error& e) {
    if (options_.log) {
      options_.log->Warn("rendezvous server: connection from " + p.peer + " (\"" + s.task +
                         "\"): cannot start a thread for its session (" + e.what() +
                         "); closed, the peer retries");
    }
    sessions_.pop_back();
  }
}

HandshakeStep RendezvousServer::RefuseWrongKey(PendingHandshake& p, const std::string& claimed) {
  (void)SendNow(p.socket, RefusedVerdict(kWrongKeyReason));
  return HandshakeStep::Refused(std::string(kWrongKeyReason), claimed);
}

HandshakeStep RendezvousServer::RefuseOtherGang(PendingHandshake& p,
                                                const RendezvousClientHello& hello,
                                                const std::string& claimed) {
  const GangIdentity& self = options_.identity;
  HandshakeTranscript t{p.nonce, hello.client_nonce, hello.task, options_.chief_task, hello.gang};
  StatusOr<Mac> expected = ClientProof(self.job_key, t);
  if (!expected.ok() || !MacEquals(*expected, hello.proof)) return RefuseWrongKey(p, claimed);
  // A holder of the key, of another gang: told the chief's gang, with a proof over it, so
  // that a task of an older gang can stop at once.
  t.gang = self.gang;
  StatusOr<Mac> chief_proof = OtherGangProof(self.job_key, t);
  if (!chief_proof.ok()) {
    (void)SendNow(p.socket, RefusedVerdict("the chief could not compute an HMAC"));
    return HandshakeStep::Refused(
        "it is of gang " + std::to_string(hello.gang) + ": " + chief_proof.status().message(),
        claimed);
  }
  (void)SendNow(p.socket, OtherGangVerdict(self.gang, *chief_proof));
  return HandshakeStep::Refused("it is of gang " + std::to_string(hello.gang) +
                                    ", this chief serves gang " + std::to_string(self.gang),
                                claimed);
}

void RendezvousServer::Serve(Session* session) {
  Status status = HandleRequests(*session);
  if (!status.ok() && !stop_.load() && options_.log != nullptr) {
    options_.log->Warn("rendezvous server: session of " + session->peer + " (\"" + session->task +
                       "\"): " + status.message());
  }
  session->stream.socket().Shutdown();
  session->done.store(true);
}

Status RendezvousServer::HandleRequests(Session& session) {
  SealedStream& stream = session.stream;
  while (!stop_.load()) {
    // Idle clients are allowed (they keep the session for the whole run); once a request
    // starts, it must arrive within io_timeout.
    if (!stream.socket().WaitReadable(DeadlineIn(std::chrono::milliseconds(200)))) continue;
    StatusOr<std::string> body = stream.Receive(DeadlineIn(options_.io_timeout));
    if (!body.ok()) {
      // The client closed its session between requests: its normal end (a reset is not, and
      // is logged).
      if (body.status().code() == StatusCode::kUnavailable) return Status::Ok();
      return body.status();
    }
    StatusOr<Request> request = ParseRequest(*body);
    if (!request.ok()) return request.status();
    TJ_RETURN_IF_ERROR(stream.Send(store_->Answer(*request), DeadlineIn(options_.io_timeout)));
  }
  return Status::Ok();
}

}  // namespace tj::cluster
