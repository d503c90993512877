#include "trainer/collective/peer_health.h"

#include "trainer/cluster/tf_config.h"

namespace tj::collective {

StatusOr<std::unique_ptr<PeerHealthResponder>> PeerHealthResponder::Start(const std::string& host) {
  std::unique_ptr<PeerHealthResponder> r(new PeerHealthResponder());
  StatusOr<cluster::Socket> listener = cluster::ListenTcp(host, 0);
  if (!listener.ok()) return listener.status().WithContext("peer health responder on " + host);
  r->listener_ = std::move(listener).value();
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  r->address_ = h + ":" + std::to_string(cluster::LocalPort(r->listener_));
  r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  return r;
}

PeerHealthResponder::~PeerHealthResponder() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void PeerHealthResponder::Loop() {
  while (!stop_.load()) {
    StatusOr<cluster::Socket> s =
        cluster::AcceptTcp(listener_, cluster::DeadlineIn(std::chrono::milliseconds(100)));
    if (!s.ok() || !s->valid()) continue;
    const char alive = 'A';
    (void)s->WriteAll(&alive, 1, cluster::DeadlineIn(std::chrono::milliseconds(100)));
  }
}

PeerState ProbePeer(const std::string& address, std::chrono::milliseconds timeout) {
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
  char answer = 0;
  Status st = s->ReadExactly(&answer, 1, deadline);
  if (st.ok()) return PeerState::kAlive;
  return st.code() == StatusCode::kDeadlineExceeded ? PeerState::kNotResponding : PeerState::kGone;
}

}  // namespace tj::collective
