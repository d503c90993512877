// A task's side of the rendezvous: an authenticated session with the chief's store
// (rendezvous_server.h). The task and the chief prove to each other that they hold the job's
// key for this gang (wire/rendezvous_protocol.h); every request and reply after that is sealed
// with the session's key. Every failure to get there is retried until the rendezvous timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "trainer/cluster/config/gang_identity.h"
#include "trainer/cluster/rendezvous/key_value_store.h"
#include "trainer/cluster/rendezvous/sealed_stream.h"

namespace tj::cluster {

struct RendezvousClientOptions {
  std::string chief_address;  // "host:port"
  std::string chief_name;     // "worker 0": the chief's task name, part of both proofs
  std::string task_name;      // this task ("worker 1"): part of both proofs
  GangIdentity identity;      // the job's key (required) and this task's gang
  // Keep retrying to reach the chief (and to be accepted by it) until this much time passed.
  std::chrono::milliseconds rendezvous_timeout{300000};
  // Deadline of each message exchange.
  std::chrono::milliseconds io_timeout{10000};
  Clock* clock = nullptr;  // for the retry deadline and backoff; RealClock when null
};

// An authenticated session with the chief's store. Thread-safe (requests are serialised).
class RendezvousClient final : public KeyValueStore {
 public:
  // Connects and authenticates both ways, retrying every failure (unreachable, refused, a
  // chief that cannot prove it holds the key) until options.rendezvous_timeout. Errors:
  //   an empty key (kPermissionDenied, at once);
  //   "rendezvous with chief host:port (worker 0) refused: wrong TJ_RENDEZVOUS_KEY (...)"
  //   or "... failed: could not reach it within 300 s (last error: ...); check ..."
  //   after the timeout (kDeadlineExceeded: a gang restart may help);
  //   at once, when the chief proves it serves a newer gang: "... refused: this task is of
  //   gang 2 (TJ_RESTART_COUNT), the chief serves gang 3: ..." (kPermissionDenied: this
  //   task was replaced and must not take part).
  static StatusOr<std::unique_ptr<RendezvousClient>> Connect(const RendezvousClientOptions& o);

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  RendezvousClient(const RendezvousClientOptions& o, SealedStream stream)
      : options_(o), stream_(std::move(stream)) {}
  // Sends one request and reads its authenticated reply.
  StatusOr<std::string> Exchange(const std::string& what, const std::string& request,
                                 Deadline deadline) TJ_REQUIRES(mu_);
  Status Fail(const std::string& what, const Status& status) TJ_REQUIRES(mu_);

  RendezvousClientOptions options_;
  Mutex mu_;
  SealedStream stream_ TJ_GUARDED_BY(mu_);
};

}  // namespace tj::cluster
