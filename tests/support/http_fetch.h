// Test support: a plain-socket HTTP/1.1 client for the project's endpoints on loopback (one
// request with Connection: close, read to EOF), and an idle connection for tests of the
// server's bounds. Header-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

namespace tj::testing {

struct HttpReply {
  int code = 0;  // 0: nothing answered (refused, closed or timed out)
  std::string head;
  std::string body;
};

// A TCP connection to 127.0.0.1:port with a receive timeout; -1 when refused.
inline int ConnectLoopback(int port, int timeout_seconds = 10) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{timeout_seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// An answer that has not come within `timeout_seconds` is none (code 0).
inline HttpReply Fetch(int port, const std::string& method, const std::string& path,
                       int timeout_seconds = 10) {
  HttpReply answer;
  const int fd = ConnectLoopback(port, timeout_seconds);
  if (fd < 0) return answer;
  const std::string request = method + " " + path +
                              " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                              "Content-Length: 0\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t split = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || raw.size() < 12 || split == std::string::npos) return answer;
  answer.code = std::stoi(raw.substr(9, 3));
  answer.head = raw.substr(0, split);
  answer.body = raw.substr(split + 4);
  return answer;
}

}  // namespace tj::testing
