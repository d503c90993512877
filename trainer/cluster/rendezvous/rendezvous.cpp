#include "trainer/cluster/rendezvous/rendezvous.h"

#include <algorithm>

#include "trainer/cluster/config/host_port.h"

namespace tj::cluster {

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
  if (o.identity.job_key.empty()) {
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
    so.identity = o.identity;
    so.chief_task = o.chief_name;
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
  co.identity = o.identity;
  co.rendezvous_timeout = o.rendezvous_timeout;
  co.io_timeout = o.io_timeout;
  co.clock = o.clock;
  StatusOr<std::unique_ptr<RendezvousClient>> client = RendezvousClient::Connect(co);
  if (!client.ok()) return client.status();
  r->client_ = std::move(client).value();
  return r;
}

}  // namespace tj::cluster
