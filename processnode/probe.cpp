#include "processnode/probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace tj::processnode {

namespace {

using Steady = std::chrono::steady_clock;

int Millis(Steady::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now());
  return static_cast<int>(std::max<long long>(0, left.count()));
}

// Connects to host:port before `deadline`; returns the socket or -1 with `detail` set.
int Connect(const std::string& host, int port, Steady::time_point deadline, std::string* detail) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    *detail = "cannot resolve " + host;
    return -1;
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    *detail = "socket: " + std::string(strerror(errno));
    return -1;
  }
  int rc = connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 && errno != EINPROGRESS) {
    *detail = "connect " + host + ":" + std::to_string(port) + ": " + strerror(errno);
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  if (rc != 0 && poll(&p, 1, Millis(deadline)) != 1) {
    *detail = "connect " + host + ":" + std::to_string(port) + ": timeout";
    close(fd);
    return -1;
  }
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    *detail = "connect " + host + ":" + std::to_string(port) + ": " + strerror(err);
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{Millis(deadline) / 1000, (Millis(deadline) % 1000) * suseconds_t{1000}};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

bool HttpGet(const Probe& p, const std::string& host, Steady::time_point deadline,
             std::string* detail) {
  int fd = Connect(host, p.port, deadline, detail);
  if (fd < 0) return false;
  std::string req =
      "GET " + p.path + " HTTP/1.1\r\nHost: " + host + ":" + std::to_string(p.port) +
      "\r\nUser-Agent: kube-probe/tj-process-node\r\nAccept: */*\r\nConnection: close\r\n";
  for (const auto& [k, v] : p.headers) req += k + ": " + v + "\r\n";
  req += "\r\n";
  std::string head;
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  bool ok = true;
  if (p.scheme == "HTTPS") {  // the kubelet does not verify probe certificates either
    ctx = SSL_CTX_new(TLS_client_method());
    ssl = ctx ? SSL_new(ctx) : nullptr;
    ok = ssl && SSL_set_fd(ssl, fd) == 1 && SSL_connect(ssl) == 1;
    if (!ok) *detail = "TLS handshake with " + host + ":" + std::to_string(p.port) + " failed";
  }
  if (ok) {
    ok = ssl ? SSL_write(ssl, req.data(), static_cast<int>(req.size())) > 0
             : send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
    if (!ok) *detail = "sending the request failed";
  }
  char buf[512];
  while (ok && head.find("\r\n") == std::string::npos && head.size() < 4096) {
    int n = ssl ? SSL_read(ssl, buf, sizeof(buf)) : static_cast<int>(recv(fd, buf, sizeof(buf), 0));
    if (n <= 0) break;
    head.append(buf, n);
  }
  if (ssl) SSL_free(ssl);
  if (ctx) SSL_CTX_free(ctx);
  close(fd);
  if (!ok) return false;
  // "HTTP/1.1 200 OK"
  auto sp = head.find(' ');
  int code = sp == std::string::npos ? 0 : std::atoi(head.c_str() + sp + 1);
  if (code >= 200 && code < 400) return true;
  *detail = code == 0 ? "no HTTP answer from " + host + ":" + std::to_string(p.port) + p.path
                      : "HTTP probe " + p.path + " answered " + std::to_string(code);
  return false;
}

bool Exec(const Probe& p, const std::vector<std::string>& env, const std::string& working_dir,
          bool mount_namespace, pid_t container_pid, Steady::time_point deadline,
          std::string* detail) {
  if (p.command.empty()) {
    *detail = "exec probe without a command";
    return false;
  }
  std::vector<char*> argv, envp;
  for (const auto& a : p.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::string ns_path = "/proc/" + std::to_string(container_pid) + "/ns/mnt";
  pid_t pid = fork();
  if (pid < 0) {
    *detail = "fork: " + std::string(strerror(errno));
    return false;
  }
  if (pid == 0) {
    setpgid(0, 0);
    if (mount_namespace && container_pid > 0) {
      int fd = open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || setns(fd, CLONE_NEWNS) != 0) _exit(126);
    }
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    if (!working_dir.empty() && chdir(working_dir.c_str()) != 0) _exit(126);
    execvpe(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (Steady::now() >= deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      *detail = "exec probe timed out";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  *detail = "exec probe exited " +
            std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  return false;
}

}  // namespace

StatusOr<Probe> ParseProbe(const json& probe, const json& container, const std::string& which) {
  const std::string where = "container " + container.value("name", "") + ", " + which;
  Probe p;
  auto port_of = [&](const json& handler) -> StatusOr<int> {
    const json port = handler.value("port", json());
    if (port.is_number_integer()) return port.get<int>();
    if (port.is_string()) {
      const std::string name = port.get<std::string>();
      if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) {
        return std::atoi(name.c_str());
      }
      for (const auto& cp : container.value("ports", json::array())) {
        if (cp.value("name", "") == name) return cp.value("containerPort", 0);
      }
      return Status::Error(where + ": port \"" + name +
                           "\" names no port of the container (spec.containers[].ports[].name)");
    }
    return Status::Error(where + ": the handler has no port");
  };
  if (probe.contains("httpGet")) {
    const json& h = probe["httpGet"];
    p.kind = Probe::Kind::kHttpGet;
    auto port = port_of(h);
    if (!port.ok()) return port.status();
    p.port = *port;
    p.path = h.value("path", "/");
    if (p.path.empty() || p.path[0] != '/') p.path = "/" + p.path;
    p.host = h.value("host", "");
    p.scheme = h.value("scheme", "HTTP");
    for (const auto& hh : h.value("httpHeaders", json::array())) {
      p.headers.emplace_back(hh.value("name", ""), hh.value("value", ""));
    }
  } else if (probe.contains("tcpSocket")) {
    p.kind = Probe::Kind::kTcpSocket;
    auto port = port_of(probe["tcpSocket"]);
    if (!port.ok()) return port.status();
    p.port = *port;
    p.host = probe["tcpSocket"].value("host", "");
  } else if (probe.contains("exec")) {
    p.kind = Probe::Kind::kExec;
    for (const auto& c : probe["exec"].value("command", json::array())) {
      p.command.push_back(c.get<std::string>());
    }
    if (p.command.empty()) return Status::Error(where + ": exec has no command");
  } else {
    return Status::Error(where + ": needs httpGet, tcpSocket or exec");
  }
  if (p.kind != Probe::Kind::kExec && (p.port <= 0 || p.port > 65535)) {
    return Status::Error(where + ": port " + std::to_string(p.port) + " is out of range");
  }
  p.initial_delay = std::chrono::seconds(std::max(0, probe.value("initialDelaySeconds", 0)));
  p.period = std::chrono::seconds(std::max(1, probe.value("periodSeconds", 10)));
  p.timeout = std::chrono::seconds(std::max(1, probe.value("timeoutSeconds", 1)));
  p.success_threshold = std::max(1, probe.value("successThreshold", 1));
  p.failure_threshold = std::max(1, probe.value("failureThreshold", 3));
  return p;
}

void ProbeTracker::Record(bool ok, Clock::TimePoint now) {
  next_ = now + probe_.period;
  if (ok) {
    failures_ = 0;
    if (++successes_ >= probe_.success_threshold) succeeded_ = true;
  } else {
    successes_ = 0;
    ++failures_;
    if (failures_ >= probe_.failure_threshold) succeeded_ = false;
  }
}

bool RunProbe(const Probe& probe, const std::string& pod_ip, const std::vector<std::string>& env,
              const std::string& working_dir, bool mount_namespace, pid_t container_pid,
              std::string* detail) {
  const auto deadline = Steady::now() + probe.timeout;
  const std::string host = probe.host.empty() ? pod_ip : probe.host;
  switch (probe.kind) {
    case Probe::Kind::kHttpGet:
      return HttpGet(probe, host, deadline, detail);
    case Probe::Kind::kTcpSocket: {
      int fd = Connect(host, probe.port, deadline, detail);
      if (fd < 0) return false;
      close(fd);
      return true;
    }
    case Probe::Kind::kExec:
      return Exec(probe, env, working_dir, mount_namespace, container_pid, deadline, detail);
  }
  return false;
}

}  // namespace tj::processnode
