#include "trainer/observe/status_server.h"

#include <cpprest/http_listener.h>

#include <exception>

namespace tj::observe {

namespace http = web::http;
using web::http::experimental::listener::http_listener;

struct StatusServer::Impl {
  std::unique_ptr<http_listener> listener;
};

namespace {
constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";
}  // namespace

StatusServer::StatusServer(int port, StatusFn status, MetricsFn metrics, std::string bind_address)
    : port_(port),
      bind_address_(std::move(bind_address)),
      status_(std::move(status)),
      metrics_(std::move(metrics)),
      impl_(std::make_unique<Impl>()) {}

StatusServer::~StatusServer() { Stop(); }

bool StatusServer::running() const { return impl_->listener != nullptr; }

Status StatusServer::Start() {
  if (port_ == 0 || running()) return Status::Ok();
  const std::string where = "status server: cannot listen on port " + std::to_string(port_);
  if (port_ < 0 || port_ > 65535) return Status::Error(where + ": not a TCP port (1-65535)");
  try {
    auto listener = std::make_unique<http_listener>(
        web::uri("http://" + bind_address_ + ":" + std::to_string(port_)));
    listener->support([this](const http::http_request& request) {
      try {
        const std::string path = request.relative_uri().path();
        const bool known = path == "/status" || path == "/metrics";
        if (!known) {
          request.reply(http::status_codes::NotFound, "not found: " + path + "\n",
                        "text/plain; charset=utf-8");
        } else if (request.method() != http::methods::GET) {
          http::http_response response(http::status_codes::MethodNotAllowed);
          response.headers().add("Allow", "GET");
          request.reply(response);
        } else if (path == "/status") {
          request.reply(http::status_codes::OK, status_ ? status_().dump() : "{}",
                        "application/json");
        } else {
          request.reply(http::status_codes::OK, metrics_ ? metrics_() : "", kPrometheusContentType);
        }
      } catch (const std::exception& e) {
        request.reply(http::status_codes::InternalError,
                      std::string("internal error: ") + e.what() + "\n",
                      "text/plain; charset=utf-8");
      }
    });
    listener->open().wait();
    impl_->listener = std::move(listener);
  } catch (const std::exception& e) {
    return Status::Error(where + ": " + e.what() +
                         " (is another process using it? choose another --status-port)");
  }
  return Status::Ok();
}

void StatusServer::Stop() {
  if (!impl_ || !impl_->listener) return;
  try {
    impl_->listener->close().wait();
  } catch (const std::exception&) {
    // Closing a listener that failed mid-way: nothing left to release.
  }
  impl_->listener.reset();
}

}  // namespace tj::observe
