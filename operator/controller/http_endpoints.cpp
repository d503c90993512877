#include "operator/controller/http_endpoints.h"

#include <cpprest/http_listener.h>

namespace tj::controller {

struct HttpEndpoints::Impl {
  std::unique_ptr<web::http::experimental::listener::http_listener> listener;
};

HttpEndpoints::HttpEndpoints(std::string bind, std::map<std::string, Handler> handlers)
    : bind_(std::move(bind)), handlers_(std::move(handlers)), impl_(std::make_unique<Impl>()) {}

HttpEndpoints::~HttpEndpoints() { Stop(); }

Status HttpEndpoints::Start() {
  if (bind_ == "0" || bind_.empty()) return Status::Ok();
  std::string host = "0.0.0.0", port = bind_;
  if (auto colon = bind_.rfind(':'); colon != std::string::npos) {
    if (colon > 0) host = bind_.substr(0, colon);
    port = bind_.substr(colon + 1);
  }
  try {
    impl_->listener = std::make_unique<web::http::experimental::listener::http_listener>(
        utility::conversions::to_string_t("http://" + host + ":" + port + "/"));
    impl_->listener->support(web::http::methods::GET, [this](const web::http::http_request& req) {
      try {
        const std::string path = utility::conversions::to_utf8string(req.relative_uri().path());
        auto it = handlers_.find(path);
        if (it == handlers_.end()) {
          req.reply(404, std::string("not found: try /metrics, /healthz or /readyz\n"));
          return;
        }
        HttpAnswer a = it->second();
        req.reply(a.code, a.body, a.content_type);
      } catch (const std::exception& e) {
        req.reply(500, std::string("internal error: ") + e.what());
      }
    });
    impl_->listener->open().wait();
  } catch (const std::exception& e) {
    impl_->listener.reset();
    return Status::Error("listening on " + bind_ + ": " + e.what() +
                         " (is the port in use? pick another with the flag)");
  }
  return Status::Ok();
}

void HttpEndpoints::Stop() {
  if (!impl_ || !impl_->listener) return;
  try {
    impl_->listener->close().wait();
  } catch (const std::exception&) {
  }
  impl_->listener.reset();
}

}  // namespace tj::controller
