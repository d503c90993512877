// Telling a dead peer from a hung one after a collective fails. Every rank runs a
// PeerHealthResponder: a listening socket whose background thread answers each connection
// with one byte. A rank whose collective failed probes the others: a refused or reset
// connection means the peer is gone; no answer within the probe timeout means it hangs (a
// SIGSTOPped or wedged process still has its socket, but no thread to answer); an answer
// means it is alive (and failing too, or just slow).
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "common/status.h"
#include "trainer/cluster/socket.h"

namespace tj::collective {

class PeerHealthResponder {
 public:
  // Listens on host (a numeric address), on a free port.
  static StatusOr<std::unique_ptr<PeerHealthResponder>> Start(const std::string& host);
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
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

enum class PeerState { kAlive, kGone, kNotResponding, kUnknown };

// Probes a responder at "host:port" for up to `timeout`.
PeerState ProbePeer(const std::string& address, std::chrono::milliseconds timeout);

}  // namespace tj::collective
