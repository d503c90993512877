// A small HTTP server for the operator's /metrics, /healthz and /readyz: GET path -> handler
// returning (status code, content type, body). Built on cpprestsdk's http_listener.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"

namespace tj::controller {

struct HttpAnswer {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpEndpoints {
 public:
  using Handler = std::function<HttpAnswer()>;
  // `bind` is ":8080", "0.0.0.0:8080" or "127.0.0.1:8080"; "0" disables the server.
  HttpEndpoints(std::string bind, std::map<std::string, Handler> handlers);
  ~HttpEndpoints();
  HttpEndpoints(const HttpEndpoints&) = delete;
  HttpEndpoints& operator=(const HttpEndpoints&) = delete;

  // Listens; the error names the address.
  Status Start();
  void Stop();

 private:
  struct Impl;
  std::string bind_;
  std::map<std::string, Handler> handlers_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tj::controller
