#include "trainer/cluster/net/link_handshake.h"

#include <utility>

namespace tj::cluster {

// ---- Acceptor.

LinkAcceptor::LinkAcceptor(Socket* listener, LinkAcceptorOptions options)
    : options_(std::move(options)),
      acceptor_(listener,
                HandshakeAcceptorOptions{options_.handshake_timeout, options_.max_pending, 64,
                                         options_.log,
                                         std::string(ChannelName(options_.channel)) +
                                             " port of rank " + std::to_string(options_.own_rank),
                                         10},
                HandshakeProtocol{
                    [this](const Nonce& nonce) {
                      return LinkServerHello(options_.channel,
                                             static_cast<uint32_t>(options_.own_rank), nonce);
                    },
                    kLinkClientHelloBytes, [this](PendingHandshake& p) { return Judge(p); }}) {}

LinkAcceptor::~LinkAcceptor() = default;

HandshakeStep LinkAcceptor::Judge(PendingHandshake& p) {
  const auto own_rank = static_cast<uint32_t>(options_.own_rank);
  const HelloCheck c =
      CheckLinkClientHello(p.received, options_.identity, options_.channel, own_rank, p.nonce);
  if (!c.refusal.ok()) {
    // A failed proof is a refusal; garbage is dropped.
    if (c.refusal.code() == StatusCode::kPermissionDenied) {
      return HandshakeStep::Refused(c.refusal.message());
    }
    return HandshakeStep::Dropped(c.refusal.message());
  }
  if (!c.complete) return HandshakeStep::Waiting();
  const int rank = static_cast<int>(c.from_rank);
  const std::string claimed = "(rank " + std::to_string(rank) + ")";
  if (!(*wanted_)(rank)) return HandshakeStep::Refused("not a rank this port takes now", claimed);
  LinkTranscript t;
  t.channel = options_.channel;
  t.gang = options_.identity.gang;
  t.from_rank = c.from_rank;
  t.to_rank = own_rank;
  t.server_nonce = p.nonce;
  t.client_nonce = c.client_nonce;
  StatusOr<Mac> proof = LinkServerProof(options_.identity.job_key, t);
  if (!proof.ok()) return HandshakeStep::Dropped("not answered: " + proof.status().message());
  if (!SendNow(p.socket, MacBytes(*proof))) {
    return HandshakeStep::Dropped("gone before the answer");
  }
  done_->socket = std::move(p.socket);
  done_->rank = rank;
  return HandshakeStep::DoneReturn();
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
                               const GangIdentity& identity, Deadline deadline) {
  const std::string port =
      std::string(ChannelName(channel)) + " port of rank " + std::to_string(to_rank);
  std::string hello(kLinkServerHelloBytes, '\0');
  if (Status st = socket.ReadExactly(hello.data(), hello.size(), deadline); !st.ok()) {
    return st.WithContext("waiting for the " + std::string(ChannelName(channel)) +
                          " handshake of rank " + std::to_string(to_rank));
  }
  StatusOr<ServerHelloCheck> server = CheckLinkServerHello(hello, channel);
  if (!server.ok()) return server.status().WithContext("the " + port);
  LinkTranscript t;
  t.channel = channel;
  t.gang = identity.gang;
  t.from_rank = static_cast<uint32_t>(from_rank);
  t.to_rank = static_cast<uint32_t>(to_rank);
  t.server_nonce = server->nonce;
  StatusOr<Nonce> nonce = NewNonce();
  if (!nonce.ok()) return nonce.status();
  t.client_nonce = *nonce;
  StatusOr<std::string> mine = LinkClientHello(identity.job_key, t);
  if (!mine.ok()) return mine.status();
  StatusOr<Mac> expected = LinkServerProof(identity.job_key, t);
  if (!expected.ok()) return expected.status();
  TJ_RETURN_IF_ERROR(socket.WriteAll(mine->data(), mine->size(), deadline));
  Mac answer{};
  if (Status st = socket.ReadExactly(answer.data(), answer.size(), deadline); !st.ok()) {
    return st.WithContext("rank " + std::to_string(to_rank) + " did not accept this task's " +
                          std::string(ChannelName(channel)) + " handshake");
  }
  if (server->rank != static_cast<uint32_t>(to_rank) || !MacEquals(answer, *expected)) {
    return Status::Error(StatusCode::kPermissionDenied,
                         "the address rank " + std::to_string(to_rank) +
                             " published did not prove it is that rank of this gang");
  }
  return socket;
}

}  // namespace tj::cluster
