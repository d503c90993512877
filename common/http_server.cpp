#include "common/http_server.h"

#include <cpprest/http_listener.h>

#include <charconv>
#include <exception>

namespace tj {

namespace http = web::http;
using web::http::experimental::listener::http_listener;

struct HttpServer::Impl {
  std::unique_ptr<http_listener> listener;
};

namespace {

void Serve(const std::map<std::string, HttpServer::Handler>& handlers,
           const http::http_request& request) {
  try {
    const std::string path = request.relative_uri().path();
    auto it = handlers.find(path);
    if (it == handlers.end()) {
      std::string known;
      for (const auto& [p, h] : handlers) known += (known.empty() ? "" : ", ") + p;
      request.reply(http::status_codes::NotFound, "not found: " + path + " (try " + known + ")\n",
                    "text/plain; charset=utf-8");
    } else if (request.method() != http::methods::GET) {
      http::http_response response(http::status_codes::MethodNotAllowed);
      response.headers().add("Allow", "GET");
      request.reply(response);
    } else {
      HttpAnswer a = it->second();
      request.reply(static_cast<http::status_code>(a.code), a.body, a.content_type);
    }
  } catch (const std::exception& e) {
    request.reply(http::status_codes::InternalError,
                  std::string("internal error: ") + e.what() + "\n", "text/plain; charset=utf-8");
  }
}

}  // namespace

HttpServer::HttpServer(std::string host, int port, std::map<std::string, Handler> handlers)
    : host_(std::move(host)),
      port_(port),
      handlers_(std::move(handlers)),
      impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() { Stop(); }

bool HttpServer::running() const { return impl_->listener != nullptr; }

Status HttpServer::Start() {
  if (port_ == 0 || running()) return Status::Ok();
  const std::string where =
      "cannot listen on port " + std::to_string(port_) + " (address " + host_ + ")";
  if (port_ < 0 || port_ > 65535) return Status::Error(where + ": not a TCP port (1-65535)");
  try {
    auto listener = std::make_unique<http_listener>(
        web::uri("http://" + host_ + ":" + std::to_string(port_) + "/"));
    listener->support([this](const http::http_request& request) { Serve(handlers_, request); });
    listener->open().wait();
    impl_->listener = std::move(listener);
  } catch (const std::exception& e) {
    return Status::Error(where + ": " + e.what());
  }
  return Status::Ok();
}

void HttpServer::Stop() {
  if (!impl_ || !impl_->listener) return;
  try {
    impl_->listener->close().wait();
  } catch (const std::exception&) {
    // Closing a listener that failed mid-way: nothing left to release.
  }
  impl_->listener.reset();
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
