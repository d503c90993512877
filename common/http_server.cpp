#include "common/http_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <tuple>
#include <unordered_map>

namespace tj {

namespace {

// Bounds on what a client can hold: the endpoints answer small documents to a few scrapers (the
// operator, Prometheus, the kubelet's probes), so a peer that opens many connections or sends
// slowly is cut off instead of starving them. Each connection costs a descriptor and at most
// libmicrohttpd's 32 KiB of buffers (8 MiB at the bound). Slow clients from more addresses than
// kMaxConnections / 4 can still fill every slot, so a new connection beyond the bound closes
// the oldest one still waiting for its request: a probe, whose request comes at once, finds
// room however many addresses drip (ConnectionTable).
constexpr unsigned kMaxConnections = 256;
constexpr unsigned kMaxConnectionsPerAddress = 4;
constexpr unsigned kIdleTimeoutSeconds = 10;
// libmicrohttpd's own bound is higher than ours by this much: the connections closed to make
// room are shut down at once but reaped on its next round.
constexpr unsigned kRoomForTheClosing = 64;
constexpr std::chrono::milliseconds kRequestDeadline{10000};

// Every open connection, and when its current request began (at accept, or at the end of the
// previous answer on a kept-alive connection). libmicrohttpd calls everything here from its one
// thread, so the table needs no lock. A request that takes longer than the deadline from its
// beginning to its answer (however steadily it drips) is cut when the server next has work: a
// new connection or a request's headers, which is when a slot may be needed.
class ConnectionTable {
 public:
  explicit ConnectionTable(std::chrono::milliseconds deadline) : deadline_(deadline) {}

  void Opened(MHD_Connection* c) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    open_[c] = Request{info != nullptr ? info->connect_fd : MHD_INVALID_SOCKET, Now()};
    Enforce();
  }
  void Closed(MHD_Connection* c) { open_.erase(c); }
  // The request's headers are in: it is being answered.
  void Answering(MHD_Connection* c) {
    if (auto it = open_.find(c); it != open_.end()) it->second.answering = true;
    Enforce();
  }
  // Answered; a kept-alive connection waits for its next request from now.
  void Answered(MHD_Connection* c) {
    if (auto it = open_.find(c); it != open_.end()) it->second = Request{it->second.fd, Now()};
  }

 private:
  struct Request {
    MHD_socket fd = MHD_INVALID_SOCKET;
    std::chrono::steady_clock::time_point since;
    bool answering = false;
    bool cut = false;
  };
  static std::chrono::steady_clock::time_point Now() { return std::chrono::steady_clock::now(); }

  // Cuts the requests past their deadline, then the oldest waiting ones beyond the bound.
  void Enforce() {
    const auto now = Now();
    unsigned live = 0;
    for (auto& [c, r] : open_) {
      if (!r.cut && now - r.since > deadline_) Cut(r);
      if (!r.cut) ++live;
    }
    while (live > kMaxConnections) {
      Request* oldest = nullptr;
      for (auto& [c, r] : open_) {
        if (r.cut) continue;
        // A request being answered goes only when none is waiting.
        if (oldest == nullptr ||
            std::tie(r.answering, r.since) < std::tie(oldest->answering, oldest->since)) {
          oldest = &r;
        }
      }
      Cut(*oldest);
      --live;
    }
  }
  // The connection's socket is shut down: libmicrohttpd sees it end and closes it.
  static void Cut(Request& r) {
    if (r.fd != MHD_INVALID_SOCKET) ::shutdown(r.fd, SHUT_RDWR);
    r.cut = true;
  }

  std::chrono::milliseconds deadline_;
  std::unordered_map<MHD_Connection*, Request> open_;
};

// What the access handler routes by: exact paths first, then prefixes.
struct Routes {
  const std::map<std::string, HttpServer::Handler>* exact = nullptr;
  const std::map<std::string, HttpServer::RequestHandler>* prefixes = nullptr;
};

// What libmicrohttpd's callbacks are given.
struct Served {
  Routes routes;
  std::unique_ptr<ConnectionTable> connections;
};

enum MHD_Result Reply(MHD_Connection* connection, int code, const std::string& content_type,
                      const std::string& body, const char* allow = nullptr) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // out of memory: the connection is closed
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type.c_str());
  if (allow != nullptr) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  enum MHD_Result queued = MHD_queue_response(connection, static_cast<unsigned>(code), response);
  MHD_destroy_response(response);
  return queued;
}

// libmicrohttpd's access handler: called once the request's headers are in; every request is
// answered then (a body, which no endpoint takes, is discarded with the connection).
enum MHD_Result Serve(void* cls, MHD_Connection* connection, const char* url, const char* method,
                      const char* /*version*/, const char* /*upload_data*/,
                      size_t* /*upload_data_size*/, void** /*request_state*/) {
  Served& served = *static_cast<Served*>(cls);
  served.connections->Answering(connection);
  const Routes& routes = served.routes;
  const std::string text = "text/plain; charset=utf-8";
  try {
    const std::string path = url;  // percent-decoded by libmicrohttpd
    const HttpServer::RequestHandler* under_prefix = nullptr;
    auto it = routes.exact->find(path);
    if (it == routes.exact->end()) {
      for (const auto& [prefix, h] : *routes.prefixes) {
        if (path.compare(0, prefix.size(), prefix) == 0) under_prefix = &h;
      }
      if (under_prefix == nullptr) {
        std::string known;
        for (const auto& [p, h] : *routes.exact) known += (known.empty() ? "" : ", ") + p;
        for (const auto& [p, h] : *routes.prefixes)
          known += (known.empty() ? "" : ", ") + p + "...";
        return Reply(connection, MHD_HTTP_NOT_FOUND, text,
                     "not found: " + path + " (try " + known + ")\n");
      }
    }
    if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0) {
      return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, text,
                   std::string(method) + " is not served here: use GET\n", "GET");
    }
    if (under_prefix == nullptr) {
      HttpAnswer a = it->second();
      return Reply(connection, a.code, a.content_type, a.body);
    }
    HttpRequest request{path, {}};
    MHD_get_connection_values(
        connection, MHD_GET_ARGUMENT_KIND,
        [](void* query, enum MHD_ValueKind, const char* key, const char* value) {
          static_cast<std::map<std::string, std::string>*>(query)->emplace(
              key, value == nullptr ? "" : value);
          return MHD_YES;
        },
        &request.query);
    HttpAnswer a = (*under_prefix)(request);
    return Reply(connection, a.code, a.content_type, a.body);
  } catch (const std::exception& e) {
    return Reply(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, text,
                 std::string("internal error: ") + e.what() + "\n");
  }
}

void OnConnection(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                  enum MHD_ConnectionNotificationCode what) {
  ConnectionTable& table = *static_cast<Served*>(cls)->connections;
  if (what == MHD_CONNECTION_NOTIFY_STARTED) {
    table.Opened(connection);
  } else {
    table.Closed(connection);
  }
}

void OnAnswered(void* cls, MHD_Connection* connection, void** /*request_state*/,
                enum MHD_RequestTerminationCode /*why*/) {
  static_cast<Served*>(cls)->connections->Answered(connection);
}

// A listening TCP socket on host:port, or an error naming the call that failed and why.
StatusOr<int> Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return Status::Error(std::string("the address does not resolve: ") + ::gai_strerror(rc));
  }
  std::string error;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    const int one = 1;  // a restarted program takes its port back at once (no TIME_WAIT wait)
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const char* failed = nullptr;
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      failed = "bind";
    } else if (::listen(fd, SOMAXCONN) != 0) {
      failed = "listen";
    }
    if (failed != nullptr) {
      const int cause = errno;
      error = std::string(failed) + ": " + std::strerror(cause) +
              (cause == EADDRINUSE ? " (another process listens there)" : "");
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return Status::Error(error);
  return fd;
}

// The whole of a PEM file, or an error naming it and what it is for.
StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || text.str().empty()) {
    return Status::Error("cannot read the TLS " + std::string(what) + " file " + path +
                         (in ? " (it is empty)" : ": " + std::string(std::strerror(errno))));
  }
  return text.str();
}

}  // namespace

struct HttpServer::Impl {
  MHD_Daemon* daemon = nullptr;
  Served served;
  std::string cert_pem, key_pem;  // HTTPS when set; libmicrohttpd reads them at the start
};

HttpServer::HttpServer(std::string host, int port, std::map<std::string, Handler> handlers)
    : host_(std::move(host)),
      port_(port),
      handlers_(std::move(handlers)),
      connections_per_address_(kMaxConnectionsPerAddress),
      request_deadline_(kRequestDeadline),
      impl_(std::make_unique<Impl>()) {}

void HttpServer::HandlePrefix(std::string prefix, RequestHandler handler) {
  prefixes_[std::move(prefix)] = std::move(handler);
}

void HttpServer::UseTls(std::string cert_file, std::string key_file) {
  tls_cert_file_ = std::move(cert_file);
  tls_key_file_ = std::move(key_file);
}

void HttpServer::SetConnectionsPerAddress(unsigned n) { connections_per_address_ = n; }

void HttpServer::SetRequestDeadline(std::chrono::milliseconds deadline) {
  request_deadline_ = deadline;
}

HttpServer::~HttpServer() { Stop(); }

bool HttpServer::running() const { return impl_->daemon != nullptr; }

Status HttpServer::Start() {
  if (port_ == 0 || running()) return Status::Ok();
  const std::string where =
      "cannot listen on port " + std::to_string(port_) + " (address " + host_ + ")";
  if (port_ < 0 || port_ > 65535) return Status::Error(where + ": not a TCP port (1-65535)");
  const bool tls = !tls_cert_file_.empty() || !tls_key_file_.empty();
  if (tls) {
    StatusOr<std::string> cert = ReadPem(tls_cert_file_, "certificate");
    if (!cert.ok()) return cert.status().WithContext(where);
    StatusOr<std::string> key = ReadPem(tls_key_file_, "key");
    if (!key.ok()) return key.status().WithContext(where);
    impl_->cert_pem = std::move(*cert);
    impl_->key_pem = std::move(*key);
  }
  impl_->served.routes = Routes{&handlers_, &prefixes_};
  impl_->served.connections = std::make_unique<ConnectionTable>(request_deadline_);
  StatusOr<int> fd = Listen(host_, port_);
  if (!fd.ok()) return fd.status().WithContext(where);
  // One internal thread polls every connection; handlers run on it, one at a time. The daemon
  // owns the socket from here on and closes it when stopped.
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD;
  MHD_OptionItem tls_options[] = {
      {MHD_OPTION_HTTPS_MEM_CERT, 0, impl_->cert_pem.data()},
      {MHD_OPTION_HTTPS_MEM_KEY, 0, impl_->key_pem.data()},
      {MHD_OPTION_END, 0, nullptr},
  };
  if (tls) flags |= MHD_USE_TLS;
  Served* served = &impl_->served;
  impl_->daemon = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Serve, served, MHD_OPTION_LISTEN_SOCKET,
      static_cast<MHD_socket>(*fd), MHD_OPTION_CONNECTION_LIMIT,
      kMaxConnections + kRoomForTheClosing, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      connections_per_address_, MHD_OPTION_CONNECTION_TIMEOUT, kIdleTimeoutSeconds,
      MHD_OPTION_NOTIFY_CONNECTION, &OnConnection, served, MHD_OPTION_NOTIFY_COMPLETED, &OnAnswered,
      served, MHD_OPTION_ARRAY, tls ? tls_options : &tls_options[2], MHD_OPTION_END);
  if (impl_->daemon == nullptr) {
    ::close(*fd);
    if (tls) {
      return Status::Error(where + ": the HTTPS server did not start: is " + tls_key_file_ +
                           " the key of the certificate " + tls_cert_file_ + ", both PEM?");
    }
    return Status::Error(where + ": the HTTP server did not start (out of memory or threads?)");
  }
  return Status::Ok();
}

void HttpServer::Stop() {
  if (!impl_ || impl_->daemon == nullptr) return;
  MHD_stop_daemon(impl_->daemon);  // closes the socket and joins the thread: nothing runs after
  impl_->daemon = nullptr;
}

StatusOr<ListenAddress> ParseListenAddress(const std::string& address) {
  ListenAddress a;
  std::string port = address;
  if (auto colon = address.rfind(':'); colon != std::string::npos) {
    if (colon > 0) a.host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (port.empty()) return a;
  const char* end = port.data() + port.size();
  auto [p, ec] = std::from_chars(port.data(), end, a.port);
  if (ec != std::errc() || p != end || a.port < 0 || a.port > 65535) {
    return Status::Error("listen address \"" + address +
                         "\": the port must be a number from 0 (off) to 65535, as in :8080");
  }
  return a;
}

}  // namespace tj
