#include "trainer/cluster/peer_handshake.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/sha256.h"

namespace tj::cluster {
namespace {

constexpr char kMagic[4] = {'T', 'J', 'C', 'H'};
constexpr uint8_t kVersion = 1;

void PutU32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
}
void PutU64(std::string& out, uint64_t v) {
  for (int s = 56; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
}
uint64_t GetBE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

StatusOr<Mac> LinkMac(std::string_view key, std::string_view label, const LinkTranscript& t) {
  std::string m(label);
  m.push_back(static_cast<char>(t.channel));
  PutU64(m, static_cast<uint64_t>(t.gang));
  PutU32(m, t.from_rank);
  PutU32(m, t.to_rank);
  m.append(reinterpret_cast<const char*>(t.server_nonce.data()), t.server_nonce.size());
  m.append(reinterpret_cast<const char*>(t.client_nonce.data()), t.client_nonce.size());
  StatusOr<Mac> mac = HmacSha256(key, m.data(), m.size());
  if (!mac.ok()) return mac.status().WithContext("authenticating a connection between tasks");
  return mac;
}

std::string ServerHello(Channel channel, uint32_t rank, const Nonce& nonce) {
  std::string out(kMagic, sizeof kMagic);
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(channel));
  PutU32(out, rank);
  out.append(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  return out;
}

// The first bytes of a hello: magic, version, channel. An error as soon as one is wrong.
Status CheckPrefix(std::string_view in, Channel channel) {
  const size_t n = std::min(in.size(), sizeof kMagic);
  if (std::memcmp(in.data(), kMagic, n) != 0)
    return Status::Error("not a tj-trainer peer (bad magic)");
  if (in.size() > 4 && static_cast<uint8_t>(in[4]) != kVersion) {
    return Status::Error("speaks peer protocol version " +
                         std::to_string(static_cast<uint8_t>(in[4])) + ", this task version " +
                         std::to_string(kVersion));
  }
  if (in.size() > 5 && static_cast<uint8_t>(in[5]) != static_cast<uint8_t>(channel)) {
    return Status::Error("asked for another channel than " + std::string(ChannelName(channel)));
  }
  return Status::Ok();
}

}  // namespace

const char* ChannelName(Channel channel) {
  switch (channel) {
    case Channel::kRing:
      return "all-reduce ring";
    case Channel::kHealth:
      return "peer health";
  }
  return "unknown";
}

StatusOr<Mac> LinkClientProof(std::string_view key, const LinkTranscript& t) {
  return LinkMac(key, "TJCH1 client proof", t);
}

StatusOr<Mac> LinkServerProof(std::string_view key, const LinkTranscript& t) {
  return LinkMac(key, "TJCH1 server proof", t);
}

StatusOr<std::string> LinkClientHello(std::string_view key, const LinkTranscript& t) {
  StatusOr<Mac> proof = LinkClientProof(key, t);
  if (!proof.ok()) return proof.status();
  std::string out(kMagic, sizeof kMagic);
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(t.channel));
  PutU32(out, t.from_rank);
  PutU64(out, static_cast<uint64_t>(t.gang));
  out.append(reinterpret_cast<const char*>(t.client_nonce.data()), t.client_nonce.size());
  out.append(reinterpret_cast<const char*>(proof->data()), proof->size());
  return out;
}

HelloCheck CheckLinkClientHello(std::string_view received, std::string_view key, int64_t gang,
                                Channel channel, uint32_t own_rank, const Nonce& server_nonce) {
  HelloCheck c;
  c.refusal = CheckPrefix(received, channel);
  if (!c.refusal.ok()) return c;
  if (received.size() < kLinkClientHelloBytes) return c;
  if (received.size() > kLinkClientHelloBytes) {
    c.refusal = Status::Error("sent more than a hello before the answer");
    return c;
  }
  c.complete = true;
  const char* p = received.data() + 6;
  c.from_rank = static_cast<uint32_t>(GetBE(p, 4));
  c.gang = static_cast<int64_t>(GetBE(p + 4, 8));
  LinkTranscript t;
  t.channel = channel;
  t.gang = gang;  // this task's: a proof for another gang does not verify
  t.from_rank = c.from_rank;
  t.to_rank = own_rank;
  t.server_nonce = server_nonce;
  std::memcpy(t.client_nonce.data(), p + 12, t.client_nonce.size());
  Mac proof{};
  std::memcpy(proof.data(), p + 12 + 32, proof.size());
  StatusOr<Mac> expected = LinkClientProof(key, t);
  if (!expected.ok()) {
    c.refusal = expected.status();  // fail closed
  } else if (!MacEquals(*expected, proof)) {
    c.refusal = Status::Error(
        StatusCode::kPermissionDenied,
        c.gang != gang ? "claims gang " + std::to_string(c.gang) + ", this task is of gang " +
                             std::to_string(gang) + " (and the proof does not verify for it)"
                       : "does not prove it holds TJ_RENDEZVOUS_KEY (wrong proof)");
  }
  return c;
}

// ---- Acceptor.

LinkAcceptor::LinkAcceptor(Socket* listener, LinkAcceptorOptions options)
    : options_(std::move(options)),
      acceptor_(
          listener, HandshakeAcceptorOptions{options_.handshake_timeout, options_.max_pending, 64},
          HandshakeProtocol{[this](const Nonce& nonce) {
                              return ServerHello(options_.channel,
                                                 static_cast<uint32_t>(options_.own_rank), nonce);
                            },
                            [this](PendingHandshake& p) { return Advance(p); },
                            [this](const PendingHandshake* p, HandshakeDrop why,
                                   const std::string& detail) { Dropped(p, why, detail); }}) {
  options_.max_pending = std::max(options_.max_pending, 1);
}

LinkAcceptor::~LinkAcceptor() = default;

void LinkAcceptor::Refuse(const PendingHandshake& p, const std::string& why) {
  ++refused_;
  last_refusal_ = p.peer + " " + why;
  if (options_.log == nullptr) return;
  constexpr int kLinesPerMinute = 10;
  const auto now = std::chrono::steady_clock::now();
  if (now - warn_window_start_ >= std::chrono::minutes(1)) {
    warn_window_start_ = now;
    warned_in_window_ = 0;
  }
  if (warned_in_window_++ >= kLinesPerMinute) return;
  options_.log->Warn(
      std::string(ChannelName(options_.channel)) + " port of rank " +
      std::to_string(options_.own_rank) + ": connection from " + p.peer + " " + why + "; closed" +
      (warned_in_window_ == kLinesPerMinute ? " (more are not logged this minute)" : ""));
}

void LinkAcceptor::Dropped(const PendingHandshake* p, HandshakeDrop why,
                           const std::string& detail) {
  if (p == nullptr) return;  // out of descriptors, nothing pending: nobody to tell
  switch (why) {
    case HandshakeDrop::kTimedOut:
      Refuse(*p, "sent no complete hello within the handshake timeout");
      return;
    case HandshakeDrop::kPushedOut:
      Refuse(*p, "closed unauthenticated: " + std::to_string(options_.max_pending) +
                     " handshakes were waiting (a flood?)");
      return;
    case HandshakeDrop::kOutOfDescriptors:
      Refuse(*p, "closed unauthenticated (" + detail + ")");
      return;
    case HandshakeDrop::kNoNonce:
      Refuse(*p, "not served: " + detail);
      return;
    case HandshakeDrop::kGoneBeforeHello:
      Refuse(*p, "gone before the hello");
      return;
  }
}

HandshakeProtocol::Step LinkAcceptor::Advance(PendingHandshake& p) {
  using Step = HandshakeProtocol::Step;
  char buf[kLinkClientHelloBytes + 1];
  const size_t room = kLinkClientHelloBytes + 1 - p.received.size();
  const ssize_t n = ::recv(p.socket.fd(), buf, room, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Step::kWaiting;
  if (n == 0) {
    Refuse(p, "closed before completing its handshake");
    return Step::kFinished;
  }
  if (n < 0) {
    Refuse(p, std::string("read: ") + std::strerror(errno));
    return Step::kFinished;
  }
  p.received.append(buf, static_cast<size_t>(n));
  const HelloCheck c =
      CheckLinkClientHello(p.received, options_.auth.key, options_.auth.gang, options_.channel,
                           static_cast<uint32_t>(options_.own_rank), p.nonce);
  if (!c.refusal.ok()) {
    Refuse(p, c.refusal.message());
    return Step::kFinished;
  }
  if (!c.complete) return Step::kWaiting;
  const int rank = static_cast<int>(c.from_rank);
  if (!(*wanted_)(rank)) {
    Refuse(p, "is rank " + std::to_string(rank) + ", not one this port takes now");
    return Step::kFinished;
  }
  LinkTranscript t;
  t.channel = options_.channel;
  t.gang = options_.auth.gang;
  t.from_rank = c.from_rank;
  t.to_rank = static_cast<uint32_t>(options_.own_rank);
  t.server_nonce = p.nonce;
  std::memcpy(t.client_nonce.data(), p.received.data() + 18, t.client_nonce.size());
  StatusOr<Mac> proof = LinkServerProof(options_.auth.key, t);
  if (!proof.ok()) {
    Refuse(p, "not answered: " + proof.status().message());
    return Step::kFinished;
  }
  if (!SendNow(p.socket,
               std::string_view(reinterpret_cast<const char*>(proof->data()), proof->size()))) {
    Refuse(p, "gone before the answer");
    return Step::kFinished;
  }
  done_->socket = std::move(p.socket);
  done_->rank = rank;
  return Step::kFinishedReturn;
}

StatusOr<LinkAcceptor::Accepted> LinkAcceptor::Next(Deadline deadline,
                                                    const std::function<bool(int)>& wanted,
                                                    const std::atomic<bool>* stop) {
  Accepted done;
  wanted_ = &wanted;
  done_ = &done;
  Status served = Status::Ok();
  while ((stop == nullptr || !stop->load()) && served.ok() && !done.socket.valid()) {
    acceptor_.ExpireDue();
    if (std::chrono::steady_clock::now() >= deadline) break;
    served = acceptor_.ServeOnce(deadline);
  }
  wanted_ = nullptr;
  done_ = nullptr;
  if (!served.ok()) return served;
  return done;
}

// ---- Client.

StatusOr<Socket> LinkHandshake(Socket socket, Channel channel, int from_rank, int to_rank,
                               const GangKey& auth, Deadline deadline) {
  Socket* s = &socket;
  char hello[kLinkServerHelloBytes];
  if (Status st = s->ReadExactly(hello, sizeof hello, deadline); !st.ok()) {
    return st.WithContext("waiting for the " + std::string(ChannelName(channel)) +
                          " handshake of rank " + std::to_string(to_rank));
  }
  if (Status st = CheckPrefix(std::string_view(hello, 6), channel); !st.ok()) {
    return st.WithContext("the " + std::string(ChannelName(channel)) + " port of rank " +
                          std::to_string(to_rank));
  }
  LinkTranscript t;
  t.channel = channel;
  t.gang = auth.gang;
  t.from_rank = static_cast<uint32_t>(from_rank);
  t.to_rank = static_cast<uint32_t>(to_rank);
  std::memcpy(t.server_nonce.data(), hello + 10, t.server_nonce.size());
  StatusOr<Nonce> nonce = NewNonce();
  if (!nonce.ok()) return nonce.status();
  t.client_nonce = *nonce;
  StatusOr<std::string> mine = LinkClientHello(auth.key, t);
  if (!mine.ok()) return mine.status();
  StatusOr<Mac> expected = LinkServerProof(auth.key, t);
  if (!expected.ok()) return expected.status();
  TJ_RETURN_IF_ERROR(s->WriteAll(mine->data(), mine->size(), deadline));
  Mac answer{};
  if (Status st = s->ReadExactly(answer.data(), answer.size(), deadline); !st.ok()) {
    return st.WithContext("rank " + std::to_string(to_rank) + " did not accept this task's " +
                          std::string(ChannelName(channel)) + " handshake");
  }
  if (GetBE(hello + 6, 4) != static_cast<uint64_t>(to_rank) || !MacEquals(answer, *expected)) {
    return Status::Error(StatusCode::kPermissionDenied,
                         "the address rank " + std::to_string(to_rank) +
                             " published did not prove it is that rank of this gang");
  }
  return socket;
}

std::string LinkAddress(const std::string& host, int port) {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

}  // namespace tj::cluster
