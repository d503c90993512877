#include "trainer/collective/peer_health.h"

#include <algorithm>
#include <system_error>
#include <thread>

#include "common/backoff.h"
#include "trainer/cluster/config/host_port.h"

namespace tj::collective {

StatusOr<std::unique_ptr<PeerHealthResponder>> PeerHealthResponder::Start(
    const std::string& host, int rank, const cluster::GangIdentity& identity, EventLog* log) {
  std::unique_ptr<PeerHealthResponder> r(new PeerHealthResponder());
  StatusOr<cluster::Socket> listener = cluster::ListenTcp(host, 0);
  if (!listener.ok()) return listener.status().WithContext("peer health responder on " + host);
  r->listener_ = std::move(listener).value();
  r->address_ = cluster::FormatHostPort(host, cluster::LocalPort(r->listener_));
  r->rank_ = rank;
  cluster::LinkAcceptorOptions ao;
  ao.channel = cluster::Channel::kHealth;
  ao.own_rank = rank;
  ao.identity = identity;
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
                    const cluster::GangIdentity& identity, std::chrono::milliseconds timeout) {
  StatusOr<cluster::HostPort> hp = cluster::ParseHostPort(address, "peer health address");
  if (!hp.ok()) return PeerState::kUnknown;
  const cluster::Deadline deadline = cluster::DeadlineIn(timeout);
  ExponentialBackoff backoff(std::chrono::milliseconds(20), std::chrono::milliseconds(200));
  // Once a try was closed unanswered, a later one that runs out of time is still the busy
  // responder (a full backlog delays the connect too), not a hung peer.
  bool closed_unanswered = false;
  while (true) {
    StatusOr<cluster::Socket> s = cluster::ConnectTcp(hp->host, hp->port, deadline);
    if (!s.ok()) {
      // Refused: nothing listens there any more. A connect timeout (or an unreachable host):
      // the peer's machine does not answer.
      if (s.status().code() == StatusCode::kUnavailable) return PeerState::kGone;
      return closed_unanswered ? PeerState::kBusy : PeerState::kNotResponding;
    }
    StatusOr<cluster::Socket> answered = cluster::LinkHandshake(
        std::move(s).value(), cluster::Channel::kHealth, own_rank, peer_rank, identity, deadline);
    if (answered.ok()) return PeerState::kAlive;
    // No answer in time: hung.
    if (answered.status().code() == StatusCode::kDeadlineExceeded) {
      return closed_unanswered ? PeerState::kBusy : PeerState::kNotResponding;
    }
    // Closed or reset unanswered: something still listens there, so the process is not known
    // to be gone; a responder whose handshake slots a flood holds closes probes so. Tried again
    // until the timeout: a process that is gone refuses the next connection.
    closed_unanswered = true;
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::milliseconds(0)) return PeerState::kBusy;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(backoff.Next(), left));
  }
}

}  // namespace tj::collective
