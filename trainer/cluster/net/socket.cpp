#include "trainer/cluster/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/backoff.h"
#include "trainer/cluster/config/host_port.h"

namespace tj::cluster {
namespace {

std::string Errno(int err) { return std::strerror(err); }

// Milliseconds left until the deadline, clamped to [0, INT_MAX].
int MillisLeft(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  if (left.count() > 1 << 30) return 1 << 30;
  return static_cast<int>(left.count());
}

// Polls fd for events until the deadline; returns >0 ready, 0 timeout, <0 error (errno).
int PollUntil(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, MillisLeft(deadline));
    if (rc < 0 && errno == EINTR) continue;
    return rc;
  }
}

Status SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return Status::Error("fcntl(O_NONBLOCK): " + Errno(errno));
  }
  return Status::Ok();
}

std::string SockaddrName(const sockaddr* sa) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown peer";
  }
  std::string_view h = host;
  if (h.starts_with("::ffff:")) h.remove_prefix(7);  // IPv4-mapped
  return FormatHostPort(h, std::atoi(serv));
}

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::Shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Status Socket::WriteAll(const void* data, size_t size, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int rc = PollUntil(fd_, POLLOUT, deadline);
      if (rc == 0) return Status::Error(StatusCode::kDeadlineExceeded, "timed out writing");
      if (rc < 0) return Status::Error("poll: " + Errno(errno));
      continue;
    }
    return Status::Error(errno == EPIPE ? StatusCode::kUnavailable : StatusCode::kUnknown,
                         "write: " + Errno(errno));
  }
  return Status::Ok();
}

Status Socket::ReadExactly(void* data, size_t size, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd_, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status::Error(StatusCode::kUnavailable, "connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int rc = PollUntil(fd_, POLLIN, deadline);
      if (rc == 0) return Status::Error(StatusCode::kDeadlineExceeded, "timed out reading");
      if (rc < 0) return Status::Error("poll: " + Errno(errno));
      continue;
    }
    return Status::Error("read: " + Errno(errno));  // a reset among them: not a clean close
  }
  return Status::Ok();
}

bool Socket::WaitReadable(Deadline deadline) { return PollUntil(fd_, POLLIN, deadline) != 0; }

std::string Socket::PeerName() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  return SockaddrName(reinterpret_cast<sockaddr*>(&ss));
}

StatusOr<Socket> ConnectTcp(const std::string& host, int port, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) return Status::Error("resolving " + host + ": " + ::gai_strerror(rc));
  // The last address's failure; refused (nothing listens) and timed out have codes of their own.
  std::string last_error = "no address";
  StatusCode last_code = StatusCode::kUnknown;
  auto connect_failed = [&](int err) {
    last_error = "connect: " + Errno(err);
    last_code = err == ECONNREFUSED ? StatusCode::kUnavailable : StatusCode::kUnknown;
  };
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) {
      last_error = "socket: " + Errno(errno);
      last_code = StatusCode::kUnknown;
      continue;
    }
    if (Status st = SetNonBlocking(s.fd()); !st.ok()) {
      last_error = st.message();
      last_code = StatusCode::kUnknown;
      continue;
    }
    int one = 1;
    ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        connect_failed(errno);
        continue;
      }
      int prc = PollUntil(s.fd(), POLLOUT, deadline);
      if (prc == 0) {
        last_error = "connect: timed out";
        last_code = StatusCode::kDeadlineExceeded;
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (prc < 0 || err != 0) {
        connect_failed(prc < 0 ? errno : err);
        continue;
      }
    }
    ::freeaddrinfo(res);
    return s;
  }
  ::freeaddrinfo(res);
  return Status::Error(last_code, last_error);
}

StatusOr<Socket> ListenTcp(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = host.empty() ? AF_INET6 : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  std::string last_error = "no address";
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) {
      if (!host.empty()) break;
      hints.ai_family = AF_INET;  // no IPv6 on this machine
    }
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0) {
      last_error = std::string("resolving: ") + ::gai_strerror(rc);
      continue;
    }
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (!s.valid()) {
        last_error = "socket: " + Errno(errno);
        continue;
      }
      int one = 1, zero = 0;
      ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (ai->ai_family == AF_INET6 && host.empty()) {
        ::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      }
      if (::bind(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
        last_error = "bind: " + Errno(errno);
        continue;
      }
      if (::listen(s.fd(), SOMAXCONN) != 0) {
        last_error = "listen: " + Errno(errno);
        continue;
      }
      if (Status st = SetNonBlocking(s.fd()); !st.ok()) {
        last_error = st.message();
        continue;
      }
      ::freeaddrinfo(res);
      return s;
    }
    ::freeaddrinfo(res);
    if (last_error.rfind("bind: ", 0) == 0 && last_error != "bind: " + Errno(EAFNOSUPPORT) &&
        last_error != "bind: " + Errno(EADDRNOTAVAIL)) {
      break;  // e.g. address in use: IPv4 would fail the same way
    }
  }
  return Status::Error(last_error);
}

int LocalPort(const Socket& socket) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

StatusOr<Socket> AcceptTcp(Socket& listener, Deadline deadline) {
  int rc = PollUntil(listener.fd(), POLLIN, deadline);
  if (rc == 0) return Socket();
  if (rc < 0) return Status::Error("poll: " + Errno(errno));
  int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      return Socket();
    }
    return Status::Error("accept: " + Errno(errno));
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return Socket(fd);
}

StatusOr<std::string> ResolveHost(const std::string& host) {
  for (int family : {AF_INET, AF_UNSPEC}) {
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0) {
      if (family == AF_UNSPEC) return Status::Error("resolving " + host + ": " + gai_strerror(rc));
      continue;
    }
    char buf[NI_MAXHOST];
    rc = ::getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
    ::freeaddrinfo(res);
    if (rc == 0) return std::string(buf);
  }
  return Status::Error("resolving " + host + ": no address");
}

bool IsLocalAddress(const std::string& ip) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(ip.c_str(), "0", &hints, &res) != 0) return false;
  bool local = false;
  Socket s(::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol));
  if (s.valid()) local = ::bind(s.fd(), res->ai_addr, res->ai_addrlen) == 0;
  ::freeaddrinfo(res);
  return local;
}

namespace {

// ResolveHost, tried again (100 ms, doubling to 1 s) until it gives an address (one of this
// host's when `own`) or `deadline` comes; then the last reason, with the time waited.
StatusOr<std::string> ResolveUntil(const std::string& host, Deadline deadline, bool own) {
  const auto start = std::chrono::steady_clock::now();
  ExponentialBackoff backoff(std::chrono::milliseconds(100), std::chrono::seconds(1));
  while (true) {
    const auto pause = backoff.Next();
    StatusOr<std::string> ip = ResolveHost(host);
    if (ip.ok() && (!own || IsLocalAddress(*ip))) return ip;
    const auto now = std::chrono::steady_clock::now();
    if (now + pause >= deadline) {
      const std::string waited =
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - start).count());
      if (!ip.ok()) {
        return ip.status().WithContext("no address after " + waited +
                                       " s of retries (is the job's headless Service there and "
                                       "the cluster DNS answering?)");
      }
      return Status::Error("resolving " + host + ": it names " + *ip +
                           ", not an address of this host, after " + waited +
                           " s of retries (does TF_CONFIG's task entry name this pod?)");
    }
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace

StatusOr<std::string> ResolveHostBefore(const std::string& host, Deadline deadline) {
  return ResolveUntil(host, deadline, /*own=*/false);
}

StatusOr<std::string> ResolveOwnHostBefore(const std::string& host, Deadline deadline) {
  return ResolveUntil(host, deadline, /*own=*/true);
}

}  // namespace tj::cluster
