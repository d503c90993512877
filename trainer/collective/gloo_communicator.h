// The CPU backend: Gloo over TCP, bootstrapped through the chief's rendezvous store
// (trainer/cluster/rendezvous.h). The chief starts the rendezvous server on its TF_CONFIG
// port and keeps serving it, from a background thread, for as long as the communicator lives
// (so a late peer with a wrong key is refused without disturbing training).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/cluster/tf_config.h"
#include "trainer/collective/communicator.h"
#include "trainer/collective/ring_allreduce.h"

namespace tj::collective {

struct GlooOptions {
  cluster::TfConfig config;
  // The job's rendezvous key (TJ_RENDEZVOUS_KEY); empty = no authentication.
  std::string rendezvous_key;
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
  // float32 only; kept to compare against). Broadcast and Barrier always take Gloo.
  bool ring_allreduce = true;
  // The values on the wire of the ring all-reduce.
  WireType allreduce_wire = WireType::kFloat32;
};

// Rendezvous, then a full mesh of TCP connections between the chief and the workers, each
// bound to its own TF_CONFIG host, and the all-reduce ring's two connections per rank. Blocks until
// every rank has arrived (or the rendezvous timeout passes). A collective of size 1 returns a
// single-process communicator at once. Errors: the evaluator or a config outside the collective;
// the chief unreachable ("... could not reach it within 300 s ..."); a wrong key ("... refused:
// wrong TJ_RENDEZVOUS_KEY"); a peer missing at the rendezvous (named). Sets SIGPIPE to SIG_IGN for
// the process: Gloo writes with writev(2), and a dead peer must be an error, not a signal.
StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const GlooOptions& options);

}  // namespace tj::collective
