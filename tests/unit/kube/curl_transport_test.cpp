// The libcurl transport (kube/curl_transport.h) against a scripted HTTP/1.1 server
// on the loopback interface: what goes out (method, path, headers, body; no "Expect:
// 100-continue"), what comes back (status, lower-cased headers, body), kept-alive connections,
// a refused connection and a server that never answers (errors naming the request, in bounded
// time), and watches: chunks as they arrive, a stop that ends a read at once, the body of a
// non-200 answer. The transport against a real API server (TLS, tokens, watches) runs in
// tests/integration/kube.
#include "kube/curl_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/subprocess.h"

namespace tj::kube {
namespace {

using Steady = std::chrono::steady_clock;

struct Request {
  std::string method, path, body;
  std::map<std::string, std::string> headers;  // names lower-cased
};

// Accepts connections on 127.0.0.1 and answers each request on them, in order, with what
// `respond` returns (raw bytes, written as given). A responder may also write to the
// connection itself (a watch) and return "", or wait for `stopping()`. Counts connections.
class ScriptedServer {
 public:
  using Responder = std::function<std::string(const Request&, int fd, ScriptedServer&)>;

  explicit ScriptedServer(Responder respond) : respond_(std::move(respond)) {
    listen_fd_ = ::tj::testing::ListenOnFreePort(INADDR_LOOPBACK, &port_);
    EXPECT_GE(listen_fd_, 0);
    acceptor_ = std::thread([this] { Accept(); });
  }

  ~ScriptedServer() {
    stopping_ = true;
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : connections_) t.join();
    for (int fd : fds_) ::close(fd);
    ::close(listen_fd_);
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  bool stopping() const { return stopping_; }
  int connections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(fds_.size());
  }
  std::vector<Request> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Accept() {
    while (!stopping_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(fd);
      connections_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  void Serve(int fd) {
    std::string in;
    char buf[4096];
    while (!stopping_) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      Request r;
      const std::string head = in.substr(0, end);
      in.erase(0, end + 4);
      const size_t sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
      r.method = head.substr(0, sp1);
      r.path = head.substr(sp1 + 1, sp2 - sp1 - 1);
      for (size_t pos = head.find("\r\n"); pos != std::string::npos;) {
        const size_t next = head.find("\r\n", pos + 2);
        const std::string line =
            head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
        if (auto colon = line.find(':'); colon != std::string::npos) {
          std::string name = line.substr(0, colon);
          for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
        }
        pos = next;
      }
      const size_t length =
          r.headers.contains("content-length") ? std::stoul(r.headers["content-length"]) : 0;
      while (in.size() < length) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      r.body = in.substr(0, length);
      in.erase(0, length);
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(r);
      }
      const std::string out = respond_(r, fd, *this);
      if (!out.empty() && ::write(fd, out.data(), out.size()) < 0) return;
    }
  }

  Responder respond_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<int> fds_;                  // GUARDED_BY(mu_)
  std::vector<std::thread> connections_;  // GUARDED_BY(mu_)
  std::vector<Request> requests_;         // GUARDED_BY(mu_)
};

std::string Answer(int status, const std::string& reason, const std::string& body,
                   const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + extra_headers + "\r\n" + body;
}

// A request by field name (HttpRequest's other members keep their defaults).
HttpRequest Req(const std::string& method, const std::string& path,
                const std::string& content_type = "", const std::string& body = "",
                const std::string& authorization = "") {
  HttpRequest r;
  r.method = method;
  r.path_and_query = path;
  r.content_type = content_type;
  r.body = body;
  r.authorization = authorization;
  return r;
}

std::unique_ptr<HttpTransport> Transport(const std::string& server,
                                         std::chrono::seconds timeout = std::chrono::seconds(5)) {
  RestConfig c;
  c.server = server;
  c.timeout = timeout;
  auto t = NewCurlTransport(c);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(*t);
}

TEST(CurlTransport, SendsTheRequestAndReturnsStatusHeadersAndBody) {
  ScriptedServer server([](const Request&, int, ScriptedServer&) {
    return Answer(201, "Created", R"({"kind":"Pod"})", "X-Kubernetes-Pf-Flowschema-Uid: abc\r\n");
  });
  auto t = Transport(server.url());
  // A body over 1 MiB: libcurl would announce it with "Expect: 100-continue" and wait.
  const std::string body =
      R"({"metadata":{"name":"p"},"x":")" + std::string(1536 * 1024, 'x') + "\"}";
  const HttpRequest req = Req("POST", "/api/v1/namespaces/ns/pods?fieldManager=tj",
                              "application/json", body, "Bearer secret-token");
  auto r = t->Send(req);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, R"({"kind":"Pod"})");
  EXPECT_EQ(r->headers["x-kubernetes-pf-flowschema-uid"], "abc");  // names lower-cased
  ASSERT_EQ(server.requests().size(), 1u);
  const Request got = server.requests()[0];
  EXPECT_EQ(got.method, "POST");
  EXPECT_EQ(got.path, "/api/v1/namespaces/ns/pods?fieldManager=tj");
  EXPECT_EQ(got.body, body);
  EXPECT_EQ(got.headers.at("content-type"), "application/json");
  EXPECT_EQ(got.headers.at("authorization"), "Bearer secret-token");
  EXPECT_EQ(got.headers.at("accept"), "application/json");
  EXPECT_FALSE(got.headers.contains("expect")) << "no 100-continue round trip before a body";
}

TEST(CurlTransport, KeepsTheConnectionAliveBetweenRequests) {
  ScriptedServer server([](const Request& r, int, ScriptedServer&) {
    return Answer(200, "OK", "{\"path\":\"" + r.path + "\"}");
  });
  auto t = Transport(server.url());
  for (const char* path : {"/a", "/b", "/c"}) {
    auto r = t->Send(Req("GET", path));
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(r->body, std::string("{\"path\":\"") + path + "\"}");
  }
  EXPECT_EQ(server.connections(), 1);
  // A DELETE without a body and a PUT with one, on the same connection.
  auto d = t->Send(Req("DELETE", "/d"));
  ASSERT_TRUE(d.ok());
  auto p = t->Send(Req("PUT", "/p", "application/json", "{}"));
  ASSERT_TRUE(p.ok());
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[3].method, "DELETE");
  EXPECT_EQ(reqs[4].method, "PUT");
  EXPECT_EQ(reqs[4].body, "{}");
  EXPECT_EQ(server.connections(), 1);
}

TEST(CurlTransport, ARefusedConnectionIsAnErrorThatNamesTheRequest) {
  // A port nobody listens on: bound, then closed.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  auto t = Transport("http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  auto r = t->Send(Req("GET", "/api/v1/pods"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, 0);
  EXPECT_NE(r.error().ToString().find("GET /api/v1/pods"), std::string::npos)
      << r.error().ToString();
}

TEST(CurlTransport, ARequestToAServerThatNeverAnswersTimesOut) {
  ScriptedServer server([](const Request&, int, ScriptedServer& s) {
    for (int i = 0; i < 200 && !s.stopping(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::string();
  });
  auto t = Transport(server.url(), std::chrono::seconds(1));
  const auto t0 = Steady::now();
  auto r = t->Send(Req("GET", "/hang"));
  const double took = std::chrono::duration<double>(Steady::now() - t0).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, 0);
  EXPECT_NE(r.error().ToString().find("GET /hang"), std::string::npos) << r.error().ToString();
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 3.0) << "the 1 s timeout was not honoured";
}

TEST(CurlTransport, AWatchDeliversChunksAsTheyComeAndAStopEndsItAtOnce) {
  ScriptedServer server([](const Request&, int fd, ScriptedServer& s) {
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    const std::string event = R"({"type":"ADDED"})";
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", event.size());
    const std::string chunk = head + size + event + "\r\n";
    if (::write(fd, chunk.data(), chunk.size()) < 0) return std::string();
    for (int i = 0; i < 500 && !s.stopping(); ++i) {  // then nothing more, for up to 10 s
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::string();
  });
  auto t = Transport(server.url());
  std::stop_source stop;
  std::string data;
  std::atomic<bool> got{false};
  Result<HttpResponse> r = ApiError{};
  Steady::time_point stopped_at;
  std::thread watcher([&] {
    HttpRequest req = Req("GET", "/api/v1/pods?watch=1");
    req.timeout = std::chrono::seconds(30);
    r = t->Stream(
        req,
        [&](std::string_view bytes) {
          data.append(bytes);
          got = true;
          return true;
        },
        stop.get_token());
  });
  for (int i = 0; i < 250 && !got; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(got) << "no chunk arrived in 5 s";
  stopped_at = Steady::now();
  stop.request_stop();
  watcher.join();
  const double took = std::chrono::duration<double>(Steady::now() - stopped_at).count();
  EXPECT_LT(took, 0.5) << "a stop must not wait for the next byte";
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(data, R"({"type":"ADDED"})");
}

TEST(CurlTransport, AWatchAnsweredWithAnErrorReturnsItsBody) {
  ScriptedServer server([](const Request&, int, ScriptedServer&) {
    return Answer(410, "Gone", R"({"kind":"Status","reason":"Expired"})");
  });
  auto t = Transport(server.url());
  bool called = false;
  auto r = t->Stream(
      Req("GET", "/api/v1/pods?watch=1"),
      [&](std::string_view) {
        called = true;
        return true;
      },
      std::stop_token());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->status, 410);
  EXPECT_EQ(r->body, R"({"kind":"Status","reason":"Expired"})");
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace tj::kube
