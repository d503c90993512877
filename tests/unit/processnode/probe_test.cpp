#include "processnode/probe.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace tj::processnode {
namespace {

using namespace std::chrono_literals;

const json kContainer = json::parse(R"j({"name": "manager",
  "ports": [{"name": "health", "containerPort": 8081}, {"name": "metrics", "containerPort": 8080}]})j");

TEST(Probe, ParsesHttpGetWithNamedPortAndDefaults) {
  auto p = ParseProbe(json::parse(R"j({"httpGet": {"path": "healthz", "port": "health"},
                                       "initialDelaySeconds": 15, "periodSeconds": 20})j"),
                      kContainer, "livenessProbe");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->kind, Probe::Kind::kHttpGet);
  EXPECT_EQ(p->port, 8081);
  EXPECT_EQ(p->path, "/healthz");
  EXPECT_EQ(p->scheme, "HTTP");
  EXPECT_EQ(p->initial_delay, 15s);
  EXPECT_EQ(p->period, 20s);
  EXPECT_EQ(p->timeout, 1s);
  EXPECT_EQ(p->success_threshold, 1);
  EXPECT_EQ(p->failure_threshold, 3);
}

TEST(Probe, ParsesTcpAndExec) {
  auto tcp = ParseProbe({{"tcpSocket", {{"port", 2222}}}}, kContainer, "readinessProbe");
  ASSERT_TRUE(tcp.ok());
  EXPECT_EQ(tcp->kind, Probe::Kind::kTcpSocket);
  EXPECT_EQ(tcp->port, 2222);
  auto exec = ParseProbe({{"exec", {{"command", {"cat", "/tmp/ready"}}}}}, kContainer, "x");
  ASSERT_TRUE(exec.ok());
  EXPECT_EQ(exec->command, (std::vector<std::string>{"cat", "/tmp/ready"}));
}

TEST(Probe, ErrorsNameContainerProbeAndField) {
  auto bad_port = ParseProbe({{"httpGet", {{"port", "nope"}}}}, kContainer, "livenessProbe");
  ASSERT_FALSE(bad_port.ok());
  EXPECT_NE(bad_port.status().message().find("container manager, livenessProbe"),
            std::string::npos);
  EXPECT_NE(bad_port.status().message().find("\"nope\""), std::string::npos);
  EXPECT_FALSE(ParseProbe(json::object(), kContainer, "readinessProbe").ok());
  EXPECT_FALSE(ParseProbe({{"tcpSocket", {{"port", 70000}}}}, kContainer, "x").ok());
  EXPECT_FALSE(ParseProbe({{"exec", {{"command", json::array()}}}}, kContainer, "x").ok());
}

TEST(Probe, TrackerHonoursDelayPeriodAndThresholds) {
  Probe p;
  p.initial_delay = 5s;
  p.period = 10s;
  p.success_threshold = 2;
  p.failure_threshold = 3;
  Clock::TimePoint t0{};
  ProbeTracker t(p, t0);
  EXPECT_FALSE(t.Due(t0 + 4s));
  EXPECT_TRUE(t.Due(t0 + 5s));
  t.Record(true, t0 + 5s);
  EXPECT_FALSE(t.succeeded());  // needs 2 in a row
  EXPECT_FALSE(t.Due(t0 + 14s));
  EXPECT_TRUE(t.Due(t0 + 15s));
  t.Record(true, t0 + 15s);
  EXPECT_TRUE(t.succeeded());
  t.Record(false, t0 + 25s);
  t.Record(false, t0 + 35s);
  EXPECT_TRUE(t.succeeded());  // two failures are below the threshold
  EXPECT_FALSE(t.failed());
  t.Record(false, t0 + 45s);
  EXPECT_TRUE(t.failed());
  EXPECT_FALSE(t.succeeded());
}

// A one-shot HTTP server on 127.0.0.1 answering `status_line` to every connection.
class TinyServer {
 public:
  explicit TinyServer(std::string status_line) : status_line_(std::move(status_line)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    EXPECT_EQ(listen(fd_, 8), 0);
    thread_ = std::thread([this] {
      for (;;) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0 || stop_) {
          if (c >= 0) close(c);
          return;
        }
        char buf[1024];
        ssize_t n = recv(c, buf, sizeof(buf), 0);
        last_request_.assign(buf, n > 0 ? n : 0);
        std::string reply = status_line_ + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        close(c);
      }
    });
  }
  ~TinyServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  std::string last_request() const { return last_request_; }

 private:
  std::string status_line_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::string last_request_;
  std::thread thread_;
};

TEST(Probe, HttpGetSucceedsOn2xxAnd3xxAndFailsOtherwise) {
  Probe p;
  p.kind = Probe::Kind::kHttpGet;
  p.path = "/readyz";
  std::string detail;
  {
    TinyServer ok("HTTP/1.1 200 OK");
    p.port = ok.port();
    EXPECT_TRUE(RunProbe(p, "127.0.0.1", {}, "", false, 0, &detail)) << detail;
    EXPECT_EQ(ok.last_request().rfind("GET /readyz HTTP/1.1\r\n", 0), 0u) << ok.last_request();
  }
  {
    TinyServer redirect("HTTP/1.1 302 Found");
    p.port = redirect.port();
    EXPECT_TRUE(RunProbe(p, "127.0.0.1", {}, "", false, 0, &detail)) << detail;
  }
  {
    TinyServer bad("HTTP/1.1 503 Service Unavailable");
    p.port = bad.port();
    EXPECT_FALSE(RunProbe(p, "127.0.0.1", {}, "", false, 0, &detail));
    EXPECT_NE(detail.find("503"), std::string::npos) << detail;
  }
}

TEST(Probe, TcpSocketFailsWhenNothingListens) {
  Probe p;
  p.kind = Probe::Kind::kTcpSocket;
  int port;
  {
    TinyServer s("HTTP/1.1 200 OK");
    port = s.port();
    p.port = port;
    std::string detail;
    EXPECT_TRUE(RunProbe(p, "127.0.0.1", {}, "", false, 0, &detail)) << detail;
  }
  std::string detail;
  EXPECT_FALSE(RunProbe(p, "127.0.0.1", {}, "", false, 0, &detail));
  EXPECT_NE(detail.find("connect"), std::string::npos) << detail;
}

TEST(Probe, ExecUsesExitCodeEnvAndTimeout) {
  Probe p;
  p.kind = Probe::Kind::kExec;
  std::string detail;
  p.command = {"/bin/sh", "-c", "test \"$READY\" = yes"};
  EXPECT_TRUE(RunProbe(p, "", {"READY=yes"}, "/", false, 0, &detail)) << detail;
  EXPECT_FALSE(RunProbe(p, "", {"READY=no"}, "/", false, 0, &detail));
  EXPECT_EQ(detail, "exec probe exited 1");
  p.command = {"/bin/sh", "-c", "sleep 5"};
  p.timeout = 1s;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(RunProbe(p, "", {}, "/", false, 0, &detail));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(detail, "exec probe timed out");
}

}  // namespace
}  // namespace tj::processnode
