// The operator's read of a trainer's /status (HttpGetJson over kube::BoundedGet) against the
// answers a hostile or broken tenant can give: an endless body, a body that stops coming, a
// deeply nested body, garbage. Each must cost at most the size cap and the timeout, and give
// nothing, without taking the operator's memory or a thread for longer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "common/json_nesting.h"
#include "operator/controller/executor.h"
#include "operator/controller/pod_view.h"
#include "operator/controller/tenant_reads.h"
#include "tests/support/fake_transport.h"

namespace tj::controller {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

// Serves every connection on 127.0.0.1 with `serve(fd)` (after reading the request head),
// one at a time, until destroyed.
class RawServer {
 public:
  explicit RawServer(std::function<void(int fd, const std::atomic<bool>& stop)> serve)
      : serve_(std::move(serve)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) continue;
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        std::string head;
        char buf[1024];
        while (head.find("\r\n\r\n") == std::string::npos) {
          const ssize_t n = ::read(c, buf, sizeof buf);
          if (n <= 0) break;
          head.append(buf, static_cast<size_t>(n));
        }
        serve_(c, stop_);
        ::close(c);
      }
    });
  }
  ~RawServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  std::function<void(int, const std::atomic<bool>&)> serve_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string Ok(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// Runs the read and returns (answer, seconds it took).
std::pair<std::optional<nlohmann::json>, double> Read(int port) {
  const auto t0 = Steady::now();
  auto j = HttpGetJson("127.0.0.1", port, "/status", milliseconds(1000));
  return {j, std::chrono::duration<double>(Steady::now() - t0).count()};
}

TEST(TrainerStatusRead, AGoodAnswerIsRead) {
  RawServer s([](int fd, const auto&) { WriteAll(fd, Ok(R"({"epoch":2,"loss":0.5})")); });
  auto [j, secs] = Read(s.port());
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ((*j)["epoch"], 2);
}

TEST(TrainerStatusRead, AnEndlessBodyStopsAtTheCap) {
  std::atomic<size_t> sent{0};
  RawServer s([&sent](int fd, const std::atomic<bool>& stop) {
    WriteAll(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"loss\":\"");
    const std::string chunk(64 * 1024, 'x');
    while (!stop) {
      const ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
  });
  auto [j, secs] = Read(s.port());
  EXPECT_FALSE(j.has_value());
  EXPECT_LT(secs, 1.5);
  // The read stopped at the cap and closed: only the socket buffers' worth was sent, not the
  // hundreds of MiB a read until the timeout takes in on loopback.
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_LT(sent.load(), size_t{16} << 20);
}

TEST(TrainerStatusRead, AHugeDeclaredBodyIsRefused) {
  RawServer s([](int fd, const auto&) {
    WriteAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n{}");
  });
  auto [j, secs] = Read(s.port());
  EXPECT_FALSE(j.has_value());
  EXPECT_LT(secs, 1.5);
}

TEST(TrainerStatusRead, ABodyThatStopsComingTimesOut) {
  RawServer s([](int fd, const std::atomic<bool>& stop) {
    WriteAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"epoch\":");
    for (int i = 0; i < 300 && !stop; ++i) std::this_thread::sleep_for(milliseconds(10));
  });
  auto [j, secs] = Read(s.port());
  EXPECT_FALSE(j.has_value());
  EXPECT_GE(secs, 0.9);
  EXPECT_LT(secs, 2.0);
}

TEST(TrainerStatusRead, DeepNestingAndGarbageGiveNothing) {
  const std::string deep = std::string(10000, '[') + std::string(10000, ']');
  for (const std::string& body : {deep, std::string("\x01\x02garbage{{"), std::string("[1,2]"),
                                  std::string(R"({"a":[[[[[[[[[1]]]]]]]]]})")}) {
    RawServer s([&body](int fd, const auto&) { WriteAll(fd, Ok(body)); });
    EXPECT_FALSE(Read(s.port()).first.has_value()) << body.substr(0, 40);
  }
}

TEST(JsonNesting, CountsObjectsAndArraysOutsideStrings) {
  EXPECT_EQ(JsonNesting("{}"), 1u);
  EXPECT_EQ(JsonNesting(R"({"a":{"b":[1]}})"), 3u);
  EXPECT_EQ(JsonNesting(R"({"a":"[[[[\"{{"})"), 1u);
  EXPECT_EQ(JsonNesting("42"), 0u);
}

}  // namespace
}  // namespace tj::controller

namespace tj::controller {
namespace {

// A pod IP on an IPv6 (or dual-stack) cluster: the URL needs the address in brackets.
TEST(TrainerStatusRead, AnIpv6PodAddress) {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    GTEST_SKIP() << "this machine has no IPv6 loopback (::1) to listen on";
  }
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread server([fd] {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return;
    const int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) return;
    char buf[1024];
    (void)::read(c, buf, sizeof buf);
    const std::string reply =
        "HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\n{\"epoch\": 2}\n";
    (void)::write(c, reply.data(), reply.size());
    ::close(c);
  });
  const auto j = HttpGetJson("::1", ntohs(addr.sin6_port), "/status", milliseconds(3000));
  server.join();
  ::close(fd);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ((*j)["epoch"], 2);
}

// A job that ends before a poll saw it still shows its last epoch: read from the chief's log.
TEST(FinalProgress, TheLastEpochAndTheTotalFromTheChiefsLog) {
  const std::string log =
      R"({"event":"restored","epoch":1,"step":0,"path":"/data/backup"})"
      "\n"
      "warning: something on stderr\n"
      R"({"event":"epoch_end","epoch":2,"steps":15,"loss":0.6,"accuracy":0.7,"lr":0.001,"seconds":1,"images_per_sec":900})"
      "\n"
      R"({"event":"epoch_end","epoch":3,"steps":15,"loss":0.5,"accuracy":0.8,"lr":0.001,"seconds":1,"images_per_sec":950})"
      "\n"
      R"({"event":"train_end","epochs":3,"test_loss":0.5,"test_accuracy":0.81})"
      "\n";
  const nlohmann::json p = FinalProgress(log);
  EXPECT_EQ(p["epoch"], 3);
  EXPECT_EQ(p["total_epochs"], 3);
  EXPECT_EQ(p["loss"], 0.5);
  EXPECT_EQ(p["accuracy"], 0.8);
  EXPECT_EQ(p["images_per_sec"], 950);
  EXPECT_TRUE(FinalProgress("no json here\n{\"event\":\"epoch_end\"").is_null());
}

// A log is the program's own output (a user's program prints what it likes): a line with the
// words but an "event" that is not a string is not ours, and never an exception that would
// end the operator's worker thread.
TEST(FinalProgress, ALineWhoseEventIsNotAStringIsSkipped) {
  const std::string log = R"({"event":"epoch_end","epoch":2,"loss":0.6})"
                          "\n"
                          R"({"event":7,"epoch_end":1,"train_end":true,"epoch":99})"
                          "\n"
                          R"({"event":["epoch_end"],"epoch":98})"
                          "\n";
  nlohmann::json p;
  ASSERT_NO_THROW(p = FinalProgress(log));
  EXPECT_EQ(p["epoch"], 2);
}

TEST(FinalProgress, ALineNestedDeeperThanAStatusIsSkipped) {
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  const std::string log = R"({"event":"epoch_end","epoch":2,"loss":0.6})"
                          "\n"
                          R"({"event":"epoch_end","epoch":3,"loss":0.5,"x":)" +
                          deep + "}\n";
  EXPECT_EQ(FinalProgress(log)["epoch"], 2);
}

TEST(LastEvaluation, ALineWhoseEventIsNotAStringIsSkipped) {
  const std::string log = R"({"event":"evaluation","checkpoint":"ckpt-2","accuracy":0.8})"
                          "\n"
                          R"({"event":{"evaluation":1},"checkpoint":"forged","accuracy":1.0})"
                          "\n"
                          R"({"event":null,"evaluation":"x","checkpoint":"forged"})"
                          "\n";
  nlohmann::json e;
  ASSERT_NO_THROW(e = LastEvaluation(log));
  EXPECT_EQ(e["checkpoint"], "ckpt-2");
}

}  // namespace
}  // namespace tj::controller

namespace tj::controller {
namespace {

using tj::testing::FakeTransport;

// A pod with a sidecar: the API server answers a log request that names no container with 400
// ("a container name must be specified"), so the operator names the TF_CONFIG container.
TEST(PodLogRead, NamesTheTrainerContainerOfAPodWithSidecars) {
  const nlohmann::json pod = {
      {"metadata", {{"name", "j-worker-0"}}},
      {"spec",
       {{"containers",
         nlohmann::json::array({{{"name", "istio-proxy"}}, {{"name", "tensorflow"}}})}}}};
  const PodView v = ViewOfPod(pod);
  EXPECT_EQ(v.trainer_container, "tensorflow");

  auto transport = std::make_unique<FakeTransport>();
  FakeTransport* sent = transport.get();
  sent->otherwise = FakeTransport::Answer(200, "log");
  PodLogReader reader(kube::RestConfig{}, std::move(transport));
  ASSERT_EQ(reader.Read("ns", v.name, v.trainer_container), "log");
  ASSERT_FALSE(sent->requests.empty());
  EXPECT_EQ(sent->requests.back().path_and_query,
            "/api/v1/namespaces/ns/pods/j-worker-0/log?tailLines=50&limitBytes=65536"
            "&container=tensorflow");
}

}  // namespace
}  // namespace tj::controller
