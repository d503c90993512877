#include "trainer/cluster/rendezvous/rendezvous_client.h"

#include <algorithm>

#include "common/backoff.h"
#include "common/duration_text.h"
#include "trainer/cluster/config/host_port.h"
#include "trainer/cluster/wire/rendezvous_protocol.h"

namespace tj::cluster {
namespace {

// After a kOtherGang verdict: the chief's gang and its proof; why this task was refused.
// *replaced when the chief proved it serves a newer gang (this task must not retry).
Status ReadOtherGang(Socket& s, const RendezvousClientOptions& o, HandshakeTranscript t,
                     Deadline deadline, bool* replaced) {
  std::string bytes(kOtherGangVerdictBytes, '\0');
  if (Status st = s.ReadExactly(bytes.data(), bytes.size(), deadline); !st.ok()) {
    return st.WithContext("reading the chief's gang");
  }
  const OtherGang other = ParseOtherGang(bytes);
  t.gang = other.chief_gang;
  StatusOr<Mac> expected = OtherGangProof(o.identity.job_key, t);
  const std::string mine =
      "this task is of gang " + std::to_string(o.identity.gang) + " (TJ_RESTART_COUNT), ";
  if (!expected.ok() || !MacEquals(*expected, other.proof)) {
    return Status::Error(StatusCode::kPermissionDenied,
                         "an answer at the chief's address named another gang without proving "
                         "it holds TJ_RENDEZVOUS_KEY (an impostor?)");
  }
  if (t.gang > o.identity.gang) {
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

// After a kRefused verdict: the chief's reason, as the refusal.
Status ReadRefusal(Socket& s, Deadline deadline) {
  StatusOr<std::string> reason = ReadLengthPrefixed(s, kMaxReason, deadline);
  return Status::Error(StatusCode::kPermissionDenied,
                       reason.ok() ? Printable(*reason) : "no reason given");
}

// The handshake on a socket connected to the chief: the session key, or why not.
StatusOr<Mac> Authenticate(Socket& s, const RendezvousClientOptions& o, Deadline deadline,
                           bool* replaced) {
  std::string server_hello(kRendezvousServerHelloBytes, '\0');
  if (Status st = s.ReadExactly(server_hello.data(), server_hello.size(), deadline); !st.ok()) {
    return st.WithContext("reading the chief's hello");
  }
  StatusOr<Nonce> server_nonce = ParseRendezvousServerHello(server_hello);
  if (!server_nonce.ok()) return server_nonce.status();
  StatusOr<Nonce> client_nonce = NewNonce();
  if (!client_nonce.ok()) return client_nonce.status();
  const HandshakeTranscript t{*server_nonce, *client_nonce, o.task_name, o.chief_name,
                              o.identity.gang};
  StatusOr<Mac> proof = ClientProof(o.identity.job_key, t);
  StatusOr<Mac> expected_server_proof = ServerProof(o.identity.job_key, t);
  StatusOr<Mac> session_key = SessionKey(o.identity.job_key, t);
  for (const StatusOr<Mac>* m : {&proof, &expected_server_proof, &session_key}) {
    if (!m->ok()) return m->status();
  }
  const std::string hello =
      EncodeClientHello({o.task_name, o.identity.gang, t.client_nonce, *proof});
  Status st = s.WriteAll(hello.data(), hello.size(), deadline);
  uint8_t verdict = static_cast<uint8_t>(Verdict::kRefused);
  if (st.ok()) st = s.ReadExactly(&verdict, 1, deadline);
  // A refused peer may see the close before the verdict.
  if (!st.ok()) return st.WithContext("authenticating");
  if (verdict == static_cast<uint8_t>(Verdict::kOtherGang)) {
    return ReadOtherGang(s, o, t, deadline, replaced);
  }
  if (verdict != static_cast<uint8_t>(Verdict::kAccepted)) return ReadRefusal(s, deadline);
  Mac server_proof{};
  if (st = s.ReadExactly(server_proof.data(), server_proof.size(), deadline); !st.ok()) {
    return st.WithContext("reading the chief's proof");
  }
  if (!MacEquals(server_proof, *expected_server_proof)) {
    return Status::Error(StatusCode::kPermissionDenied,
                         "the chief did not prove it holds TJ_RENDEZVOUS_KEY (an impostor at "
                         "its address, or a chief with another key)");
  }
  return *session_key;
}

// One connection attempt: an authenticated session, or why not (all retried but `replaced`).
StatusOr<SealedStream> TryConnect(const RendezvousClientOptions& o, const HostPort& chief,
                                  bool* replaced) {
  const Deadline deadline = DeadlineIn(o.io_timeout);
  StatusOr<Socket> s = ConnectTcp(chief.host, chief.port, deadline);
  if (!s.ok()) return s.status();
  StatusOr<Mac> session_key = Authenticate(*s, o, deadline, replaced);
  if (!session_key.ok()) return session_key.status();
  return SealedStream(std::move(s).value(), *session_key, SealedStream::End::kClient);
}

}  // namespace

StatusOr<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(
    const RendezvousClientOptions& o) {
  TJ_RETURN_IF_ERROR(RequireJobKey(o.identity, "rendezvous with chief " + o.chief_address));
  Clock* clock = o.clock != nullptr ? o.clock : RealClock::Get();
  const std::string chief = "chief " + o.chief_address + " (" + o.chief_name + ")";
  StatusOr<HostPort> hp = ParseHostPort(o.chief_address, "rendezvous chief address");
  if (!hp.ok()) return hp.status();
  const auto start = clock->Now();
  ExponentialBackoff backoff(std::chrono::milliseconds(50), std::chrono::seconds(1));
  Status last, refusal;  // the last error, and the last refusal (the more telling one)
  while (true) {
    bool replaced = false;
    StatusOr<SealedStream> session = TryConnect(o, *hp, &replaced);
    if (session.ok()) {
      return std::unique_ptr<RendezvousClient>(new RendezvousClient(o, std::move(*session)));
    }
    if (replaced) {
      return Status::Error(StatusCode::kPermissionDenied,
                           "rendezvous with " + chief + " refused: " + session.status().message());
    }
    // Everything is retried: a refusal or a failed proof comes from whoever answers at the
    // chief's address, which may be an impostor or a chief of an older gang; the real one may
    // be there on the next try.
    last = session.status();
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
                             " (retried for " + FormatSeconds(o.rendezvous_timeout) +
                             "); check that every task of the job has the same "
                             "TJ_RENDEZVOUS_KEY");
  }
  return Status::Error(StatusCode::kDeadlineExceeded,
                       "rendezvous with " + chief + " failed: could not reach it within " +
                           FormatSeconds(o.rendezvous_timeout) + " (last error: " + last.message() +
                           "); check that the chief is running and that TF_CONFIG names its "
                           "host:port");
}

Status RendezvousClient::Fail(const std::string& what, const Status& status) {
  stream_.socket().Close();  // the stream is out of step now; later calls fail fast
  return status.WithContext("rendezvous " + what + " with chief " + options_.chief_address + " (" +
                            options_.chief_name + ")");
}

StatusOr<std::string> RendezvousClient::Exchange(const std::string& what,
                                                 const std::string& request, Deadline deadline) {
  if (!stream_.socket().valid()) return Fail(what, Status::Error("connection lost earlier"));
  if (Status st = stream_.Send(request, deadline); !st.ok()) return Fail(what, st);
  StatusOr<std::string> reply = stream_.Receive(deadline);
  if (!reply.ok()) return Fail(what, reply.status());
  return reply;
}

Status RendezvousClient::Set(const std::string& key, const std::string& value) {
  MutexLock lock(mu_);
  const std::string what = "set \"" + key + "\"";
  StatusOr<std::string> reply =
      Exchange(what, EncodeRequest({.op = Op::kSet, .key = key, .value = value}),
               DeadlineIn(options_.io_timeout));
  if (!reply.ok()) return reply.status();
  if (Status st = ParseSetReply(*reply); !st.ok()) return Fail(what, st);
  return Status::Ok();
}

StatusOr<std::string> RendezvousClient::Get(const std::string& key) {
  MutexLock lock(mu_);
  const std::string what = "get \"" + key + "\"";
  StatusOr<std::string> reply =
      Exchange(what, EncodeRequest({.op = Op::kGet, .key = key}), DeadlineIn(options_.io_timeout));
  if (!reply.ok()) return reply.status();
  StatusOr<GetResult> got = ParseGetReply(*reply);
  if (!got.ok()) return Fail(what, got.status());
  if (!got->found) return KeyNotSet(key);
  return std::move(got->value);
}

Status RendezvousClient::Wait(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  // The server answers by the timeout; allow io_timeout on top for the transfer.
  StatusOr<std::string> reply =
      Exchange("wait", EncodeRequest({.op = Op::kWait, .keys = keys, .timeout = timeout}),
               DeadlineIn(timeout + options_.io_timeout));
  if (!reply.ok()) return reply.status();
  StatusOr<bool> all_set = ParseWaitReply(*reply);
  if (!all_set.ok()) return Fail("wait", all_set.status());
  if (!*all_set) return KeysTimedOut(keys, timeout);
  return Status::Ok();
}

}  // namespace tj::cluster
