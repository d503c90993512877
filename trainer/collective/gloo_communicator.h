// The CPU backend, bootstrapped through the chief's rendezvous store
// (trainer/cluster/rendezvous/rendezvous.h): every collective (all-reduce, broadcast, barrier) runs
// over the ring of ring_allreduce.h, whose connections are authenticated with the job's key and the
// gang's number, as are the peer-health probes (peer_health.h). The chief starts the rendezvous
// server on its TF_CONFIG port and keeps serving it, from a background thread, for as long as the
// communicator lives (so a late peer with a wrong key is refused without disturbing training). Gloo
// (its TCP full mesh) is used only for its own all-reduce, on request (ring_allreduce = false): its
// pairs are NOT authenticated.
//
// (The names keep "Gloo" from when Gloo carried every collective.)
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/cluster/config/gang_identity.h"
#include "trainer/cluster/config/tf_config.h"
#include "trainer/collective/communicator.h"
#include "trainer/collective/ring_allreduce.h"

namespace tj::collective {

struct GlooOptions {
  cluster::TfConfig config;
  // The job's key (required with more than one member) and the gang's number: bound into
  // every handshake, so that a task without the key or of another gang cannot join.
  cluster::GangIdentity identity;
  // How long to keep trying to reach the chief, and to wait for every peer to arrive.
  std::chrono::milliseconds rendezvous_timeout{300000};
  // The longest any collective may wait on a peer (Gloo's context timeout).
  std::chrono::milliseconds collective_timeout{60000};
  // Deadline of each rendezvous message exchange.
  std::chrono::milliseconds io_timeout{10000};
  // Address the chief's rendezvous server listens on: empty = all interfaces. Set it to the
  // chief's own host where several jobs share one machine with distinct loopback addresses.
  std::string rendezvous_bind_host;
  // Warnings (refused peers) go here; must outlive the communicator. Required.
  EventLog* log = nullptr;
  // AllReduceSum over the ring of ring_allreduce.h (true) or Gloo's own all-reduce (false,
  // float32 only, kept to compare against; its full mesh is not authenticated). Broadcast and
  // Barrier always take the ring.
  bool ring_allreduce = true;
  // The values on the wire of the ring all-reduce.
  WireType allreduce_wire = WireType::kFloat32;
};

// Rendezvous, then the ring's two authenticated connections per rank, each bound to the
// rank's own TF_CONFIG host (and Gloo's full mesh with ring_allreduce = false). Blocks until
// every rank has arrived (or the rendezvous timeout passes). A collective of size 1 returns a
// single-process communicator at once. Errors: the evaluator or a config outside the
// collective; the chief unreachable ("... could not reach it within 300 s ..."); a wrong key
// ("... refused: wrong TJ_RENDEZVOUS_KEY"); a task of a replaced gang ("... refused: this task
// is of gang 2 ..."); a peer missing at the rendezvous (named). Sets SIGPIPE to SIG_IGN for the
// process: a dead peer must be an error, not a signal.
StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const GlooOptions& options);

}  // namespace tj::collective
