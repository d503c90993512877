// Blocking-with-deadline TCP helpers for the rendezvous: every call takes a deadline and
// fails (never hangs) when it passes. Sockets are non-blocking underneath and waited on
// with poll(2); writes use MSG_NOSIGNAL so a closed peer is an error, not a SIGPIPE.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tj::cluster {

using Deadline = std::chrono::steady_clock::time_point;

inline Deadline DeadlineIn(std::chrono::milliseconds d) {
  return std::chrono::steady_clock::now() + d;
}

// An owned socket file descriptor; closed on destruction. Movable, not copyable.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { Close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Close();
  // shutdown(2) both directions: wakes a thread blocked on this socket in poll().
  void Shutdown();

  // Writes all of data before the deadline.
  Status WriteAll(const void* data, size_t size, Deadline deadline);
  // Reads exactly size bytes before the deadline; a closed peer is an error ("connection
  // closed by peer").
  Status ReadExactly(void* data, size_t size, Deadline deadline);
  // Waits until the socket is readable (or the peer closed it), up to the deadline.
  // Returns false on timeout.
  bool WaitReadable(Deadline deadline);

  // The peer as "ip:port" (for log lines), or "unknown peer".
  std::string PeerName() const;

 private:
  int fd_ = -1;
};

// Connects to host:port (every address it resolves to, in order) before the deadline.
StatusOr<Socket> ConnectTcp(const std::string& host, int port, Deadline deadline);

// Listens on host:port; an empty host means all interfaces (IPv6 dual-stack where the system
// has it, else IPv4). SO_REUSEADDR is set so a restarted process can rebind at once. The
// backlog is the system's maximum (SOMAXCONN): under a flood of connections a real peer's
// still finds room while the server drains the queue.
// Port 0 picks a free port (see LocalPort).
StatusOr<Socket> ListenTcp(const std::string& host, int port);
int LocalPort(const Socket& socket);

// Accepts one connection if one arrives before the deadline; an invalid Socket on timeout.
StatusOr<Socket> AcceptTcp(Socket& listener, Deadline deadline);

// Resolves a host name to a numeric address string, preferring IPv4 ("127.0.1.2").
StatusOr<std::string> ResolveHost(const std::string& host);

// ResolveHost, tried again until `deadline` while the name does not resolve: a pod's own
// DNS name (<pod>.<service>.<ns>.svc) appears only once the endpoints controller and the
// cluster DNS have seen the pod, a few seconds after it starts. The last error, with the
// time waited, when it never resolves.
StatusOr<std::string> ResolveHostBefore(const std::string& host, Deadline deadline);

// This process's own TF_CONFIG host: as ResolveHostBefore, and also tried again while the
// address it resolves to is not one of this host's (a DNS record not yet updated for a pod
// re-created under the same name still names the old pod's address for a moment).
StatusOr<std::string> ResolveOwnHostBefore(const std::string& host, Deadline deadline);

// Whether `ip` (numeric) is an address of this host: a socket can be bound to it.
bool IsLocalAddress(const std::string& ip);

}  // namespace tj::cluster
