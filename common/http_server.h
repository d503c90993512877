// The project's one small HTTP server, for the trainer's /status and /metrics, the operator's
// /metrics, /healthz and /readyz, and the process node's kubelet log endpoint (over TLS):
// GET <path> -> a handler's answer.
//   a path under a prefix served -> that prefix's handler, given the path and query (when no
//                                   exact path matches)
//   unknown path                 -> 404 naming the paths served
//   other method on a known path -> 405 with "Allow: GET"
//   a handler that throws        -> 500 with the exception's text, never a crash
//   a client that idles 10 s, or holds more than 4 of the 256 connections -> cut off
//   a request not answered 10 s after it began (headers and body together, however steadily
//   they drip)                   -> cut off
//   a connection beyond the 256  -> the oldest one still waiting for its request is cut off
// so slow clients, from however many addresses, cannot take the slots of a liveness probe.
// Handlers run one at a time on the server's own thread (not the caller's): they must be
// thread-safe with respect to the rest of the program, and quick, as they hold up other clients.
// Built on libmicrohttpd (kept out of this header; library tj_http).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"

namespace tj {

// Prometheus' text exposition format, version 0.0.4.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

struct HttpAnswer {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// What a prefix's handler is given: the path and the query parameters, both percent-decoded.
struct HttpRequest {
  std::string path;
  std::map<std::string, std::string> query;
};

class HttpServer {
 public:
  using Handler = std::function<HttpAnswer()>;
  using RequestHandler = std::function<HttpAnswer(const HttpRequest&)>;

  // `host` is an address to bind ("0.0.0.0" for all); `port` 0 disables the server (Start()
  // then does nothing).
  HttpServer(std::string host, int port, std::map<std::string, Handler> handlers);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before Start(): GET requests whose path starts with `prefix` (as "/containerLogs/") and
  // that no exact path matches go to `handler`.
  void HandlePrefix(std::string prefix, RequestHandler handler);
  // Before Start(): serve HTTPS with the PEM certificate (chain) and key in these files, read
  // at Start(); a file that cannot be read is an error naming it.
  void UseTls(std::string cert_file, std::string key_file);
  // Before Start(): how many connections one client address may hold (default 4, of 256). A
  // server whose clients are few known peers behind one address (the API server asking the
  // process node for logs) raises it.
  void SetConnectionsPerAddress(unsigned n);
  // Before Start(): how long a request may take from its beginning (the connection's accept, or
  // the previous answer on a kept-alive one) to its answer (default 10 s); checked whenever a
  // connection arrives or a request's headers are in, which is when a slot may be wanted.
  void SetRequestDeadline(std::chrono::milliseconds deadline);

  // Starts listening; the error names the port, the address and the cause (a port another
  // process holds says so). Idempotent.
  Status Start();
  // Stops listening, closes every connection and joins the server's thread: no handler runs
  // once it returns. Idempotent.
  void Stop();

  bool running() const;

 private:
  struct Impl;
  std::string host_;
  int port_;
  std::map<std::string, Handler> handlers_;
  std::map<std::string, RequestHandler> prefixes_;
  std::string tls_cert_file_, tls_key_file_;
  unsigned connections_per_address_;
  std::chrono::milliseconds request_deadline_;
  std::unique_ptr<Impl> impl_;
};

// Splits a listen address as flags give it: "host:port", ":port" or "port" (host "0.0.0.0");
// "0" or "" is port 0 (disabled). An error names the address and what a port must be.
struct ListenAddress {
  std::string host = "0.0.0.0";
  int port = 0;
};
StatusOr<ListenAddress> ParseListenAddress(const std::string& address);

}  // namespace tj
