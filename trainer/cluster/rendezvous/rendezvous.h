// The rendezvous: a tiny key-value store (key_value_store.h) that the chief serves on its own
// TF_CONFIG port (rendezvous_server.h) and every other task of the collective reaches through
// an authenticated session (rendezvous_client.h), so that the processes can find each other
// (the ring's and the health responders' addresses, Gloo's bootstrap, the NCCL unique id).
// The job's key (TJ_RENDEZVOUS_KEY) is required: the chief and each peer prove to each other
// that they hold it for their gang (wire/rendezvous_protocol.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/event_log.h"
#include "common/status.h"
#include "trainer/cluster/config/gang_identity.h"
#include "trainer/cluster/config/tf_config.h"
#include "trainer/cluster/rendezvous/key_value_store.h"
#include "trainer/cluster/rendezvous/rendezvous_client.h"
#include "trainer/cluster/rendezvous/rendezvous_server.h"

namespace tj::cluster {

// One process's place in the rendezvous: the chief serves, everyone else connects.
struct RendezvousOptions {
  std::string chief_address;  // "host:port" (TfConfig::chief_address())
  std::string chief_name;     // "worker 0"
  std::string task_name;      // this task
  bool is_chief = false;
  int collective_size = 0;  // chief and workers; with more than one an empty key is refused
  GangIdentity identity;    // the job's key (required) and the gang, every task's the same
  std::string bind_host;    // the chief's listen address; empty = all interfaces
  std::chrono::milliseconds rendezvous_timeout{300000};
  std::chrono::milliseconds io_timeout{10000};
  EventLog* log = nullptr;  // required on the chief
  Clock* clock = nullptr;   // RealClock when null
};

// Fills chief, task, role and size fields from a TfConfig (a collective member).
RendezvousOptions RendezvousOptionsFor(const TfConfig& config);

// Holds the chief's server or a peer's client for as long as the process needs the store.
class Rendezvous {
 public:
  static StatusOr<std::unique_ptr<Rendezvous>> Join(const RendezvousOptions& options);
  KeyValueStore& store() { return server_ ? server_->local_store() : *client_; }
  // The server on the chief, null elsewhere.
  RendezvousServer* server() { return server_.get(); }

 private:
  Rendezvous() = default;
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<RendezvousClient> client_;
};

}  // namespace tj::cluster
