// Clients from many source addresses on one machine: every 127.0.0.x is the loopback
// interface, so a test can bind its client sockets to 127.0.0.2, 127.0.0.3, ... and look to the
// server like that many machines (pods). ConnectFrom opens one such connection; LoopbackFlood
// keeps a flood of strangers coming from a range of them until it is destroyed.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>

namespace tj::testing {

// A connection to 127.0.0.1:port from 127.0.0.<host> (2..254), or -1. Its reads and writes
// time out after `timeout_seconds`.
inline int ConnectFrom(int port, int host, int timeout_seconds = 10) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{timeout_seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(0x7f000000u | static_cast<uint32_t>(host));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Closes with a reset: a flood of many short connections leaves no TIME_WAIT behind to run
// the source ports out.
inline void CloseWithReset(int fd) {
  linger now{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
  ::close(fd);
}

// Strangers at 127.0.0.1:port, from 127.0.0.<first_host> .. <first_host + hosts - 1> in turn:
// each connects, sends `first_bytes` (the start of a valid hello, say) and holds the
// connection; the flood keeps `hold` of them open, resetting the oldest as it opens a new
// one, as fast as it can until destroyed.
class LoopbackFlood {
 public:
  LoopbackFlood(int port, int first_host, int hosts, const std::string& first_bytes, int hold)
      : thread_([=, this] {
          std::deque<int> open;
          for (int i = 0; !stop_.load(); ++i) {
            const int fd = ConnectFrom(port, first_host + i % hosts, 1);
            if (fd >= 0) {
              ::send(fd, first_bytes.data(), first_bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
              open.push_back(fd);
              connections_.fetch_add(1);
            }
            while (static_cast<int>(open.size()) > hold || (fd < 0 && !open.empty())) {
              CloseWithReset(open.front());
              open.pop_front();
            }
          }
          for (int fd : open) CloseWithReset(fd);
        }) {}
  ~LoopbackFlood() {
    stop_.store(true);
    thread_.join();
  }
  LoopbackFlood(const LoopbackFlood&) = delete;
  LoopbackFlood& operator=(const LoopbackFlood&) = delete;

  // Connections opened so far.
  int connections() const { return connections_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace tj::testing
