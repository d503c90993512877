// The node's kubelet log endpoint (`kubectl logs`): GET /containerLogs/<ns>/<pod>/<container>
// over TLS, with the kubelet's tailLines and limitBytes.
#include <cpprest/http_listener.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "localcluster/node_agent.h"

namespace tj::localnode {

namespace fs = std::filesystem;

namespace {

std::string SafeName(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c == '/') c = '_';
  }
  return out;
}

}  // namespace

std::string NodeAgent::LogFile(const std::string& ns, const std::string& pod,
                               const std::string& container) const {
  std::string f = options_.log_dir + "/pods/" + SafeName(ns) + "_" + SafeName(pod) + "_" +
                  SafeName(container) + ".log";
  return fs::exists(f) ? f : "";
}

void NodeAgent::StartLogServer() {
  using web::http::http_request;
  using web::http::experimental::listener::http_listener;
  using web::http::experimental::listener::http_listener_config;
  http_listener_config cfg;
  std::string cert = options_.tls_cert_file, key = options_.tls_key_file;
  cfg.set_ssl_context_callback([cert, key](boost::asio::ssl::context& ctx) {
    ctx.use_certificate_chain_file(cert);
    ctx.use_private_key_file(key, boost::asio::ssl::context::pem);
  });
  std::string url = "https://" + options_.host_ip + ":" + std::to_string(options_.kubelet_port);
  auto listener = std::make_shared<http_listener>(url, cfg);
  listener->support(web::http::methods::GET, [this](const http_request& req) {
    // /containerLogs/<ns>/<pod>/<container>
    auto parts = web::uri::split_path(web::uri::decode(req.relative_uri().path()));
    if (parts.size() == 4 && parts[0] == "containerLogs") {
      std::string f = LogFile(parts[1], parts[2], parts[3]);
      if (!f.empty()) {
        std::ifstream in(f);
        std::stringstream ss;
        ss << in.rdbuf();
        std::string body = ss.str();
        auto q = web::uri::split_query(req.relative_uri().query());
        if (auto it = q.find("tailLines"); it != q.end()) {
          int n = std::max(0, std::atoi(it->second.c_str()));
          size_t pos = body.size();
          if (!body.empty() && body.back() == '\n') --pos;
          for (int i = 0; i < n && pos != std::string::npos && pos > 0; ++i) {
            pos = body.rfind('\n', pos - 1);
          }
          if (pos != std::string::npos && pos > 0) body = body.substr(pos + 1);
        }
        // As the kubelet: at most limitBytes of the selected output, from its start.
        if (auto it = q.find("limitBytes"); it != q.end()) {
          const long long limit = std::atoll(it->second.c_str());
          if (limit > 0 && static_cast<size_t>(limit) < body.size()) body.resize(limit);
        }
        req.reply(web::http::status_codes::OK, body, "text/plain").wait();
        return;
      }
    }
    req.reply(web::http::status_codes::NotFound, "no such container log\n", "text/plain").wait();
  });
  try {
    listener->open().wait();
    log_server_ = listener;
  } catch (const std::exception& e) {
    log_->Warn("log endpoint " + url + " did not start (kubectl logs will not work): " + e.what());
  }
}

void NodeAgent::StopLogServer() {
  if (!log_server_) return;
  std::static_pointer_cast<web::http::experimental::listener::http_listener>(log_server_)
      ->close()
      .wait();
  log_server_.reset();
}

}  // namespace tj::localnode
