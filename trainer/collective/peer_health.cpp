#include "trainer/collective/peer_health.h"

#include <system_error>

#include "trainer/cluster/tf_config.h"

namespace tj::collective {

StatusOr<std::unique_ptr<PeerHealthResponder>> PeerHealthResponder::Start(
    const std::string& host, int rank, const cluster::GangKey& auth, EventLog* log) {
  std::unique_ptr<PeerHealthResponder> r(new PeerHealthResponder());
  StatusOr<cluster::Socket> listener = cluster::ListenTcp(host, 0);
  if (!listener.ok()) return listener.status().WithContext("peer health responder on " + host);
  r->listener_ = std::move(listener).value();
  r->address_ = cluster::LinkAddress(host, cluster::LocalPort(r->listener_));
  r->rank_ = rank;
  cluster::LinkAcceptorOptions ao;
  ao.channel = cluster::Channel::kHealth;
  ao.own_rank = rank;
  ao.auth = auth;
  ao.handshake_timeout = std::chrono::milliseconds(2000);
  ao.log = log;
  r->acceptor_ = std::make_unique<cluster::LinkAcceptor>(&r->listener_, ao);
  try {
    r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  } catch (const std::system_error& e) {
    return Status::Error(std::string("peer health responder: cannot start its thread: ") +
                         e.what());
  }
  return r;
}

PeerHealthResponder::~PeerHealthResponder() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void PeerHealthResponder::Loop() {
  // Every probe accepted has been answered with this rank's proof: that is the answer.
  const int self = rank_;
  while (!stop_.load()) {
    StatusOr<cluster::LinkAcceptor::Accepted> probe = acceptor_->Next(
        cluster::DeadlineIn(std::chrono::seconds(1)), [self](int r) { return r != self; }, &stop_);
    if (!probe.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

PeerState ProbePeer(const std::string& address, int own_rank, int peer_rank,
                    const cluster::GangKey& auth, std::chrono::milliseconds timeout) {
  StatusOr<cluster::HostPort> hp = cluster::ParseHostPort(address, "peer health address");
  if (!hp.ok()) return PeerState::kUnknown;
  const cluster::Deadline deadline = cluster::DeadlineIn(timeout);
  StatusOr<cluster::Socket> s = cluster::ConnectTcp(hp->host, hp->port, deadline);
  if (!s.ok()) {
    // Refused: nothing listens there any more. A connect timeout (or an unreachable host):
    // the peer's machine does not answer.
    return s.status().code() == StatusCode::kUnavailable ? PeerState::kGone
                                                         : PeerState::kNotResponding;
  }
  StatusOr<cluster::Socket> answered = cluster::LinkHandshake(
      std::move(s).value(), cluster::Channel::kHealth, own_rank, peer_rank, auth, deadline);
  if (answered.ok()) return PeerState::kAlive;
  // No answer in time: hung. Closed, reset, or an answer that is not that rank's: gone.
  return answered.status().code() == StatusCode::kDeadlineExceeded ? PeerState::kNotResponding
                                                                   : PeerState::kGone;
}

}  // namespace tj::collective
