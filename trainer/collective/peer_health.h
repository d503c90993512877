// Telling a dead peer from a hung one after a collective fails. Every rank runs a
// PeerHealthResponder: a listening socket whose background thread answers each
// authenticated probe (trainer/cluster/net/link_handshake.h: a rank of this gang, with the job's
// key) with its own proof. A rank whose collective failed probes the others: a refused
// connection means the peer is gone; no answer within the probe timeout means it hangs (a
// SIGSTOPped or wedged process still has its socket, but no thread to answer); an answer that
// proves it is that rank means it is alive (and failing too, or just slow); a probe closed
// unanswered is tried again, and when every try until the timeout is closed so, the responder
// is busy (strangers hold its handshake slots), which says nothing of the peer. Strangers at
// the responder's port are closed after a short handshake timeout, served alongside the real
// probes, never ahead of them.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/cluster/config/gang_identity.h"
#include "trainer/cluster/net/link_handshake.h"
#include "trainer/cluster/net/socket.h"

namespace tj::collective {

class PeerHealthResponder {
 public:
  // Listens on host (a numeric address), on a free port, as rank `rank` of the gang
  // `identity` names. `log` (may be null) gets the refused connections, rate-limited.
  static StatusOr<std::unique_ptr<PeerHealthResponder>> Start(const std::string& host, int rank,
                                                              const cluster::GangIdentity& identity,
                                                              EventLog* log = nullptr);
  ~PeerHealthResponder();
  PeerHealthResponder(const PeerHealthResponder&) = delete;
  PeerHealthResponder& operator=(const PeerHealthResponder&) = delete;
  // "host:port" ("[v6]:port") to publish for the probes.
  const std::string& address() const { return address_; }

 private:
  PeerHealthResponder() = default;
  void Loop();
  cluster::Socket listener_;
  std::string address_;
  std::unique_ptr<cluster::LinkAcceptor> acceptor_;
  int rank_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

enum class PeerState { kAlive, kGone, kNotResponding, kBusy, kUnknown };

// Probes rank `peer_rank`'s responder at "host:port" for up to `timeout`, as rank `own_rank`,
// trying again while it closes the probe unanswered (a backoff of 20 to 200 ms).
PeerState ProbePeer(const std::string& address, int own_rank, int peer_rank,
                    const cluster::GangIdentity& identity, std::chrono::milliseconds timeout);

}  // namespace tj::collective
