// The node's kubelet log endpoint (`kubectl logs`): GET /containerLogs/<ns>/<pod>/<container>
// over TLS, with the kubelet's tailLines and limitBytes, on common/http_server.h.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/http_server.h"
#include "processnode/node_agent.h"

namespace tj::processnode {

namespace fs = std::filesystem;

namespace {

// The API server is the endpoint's one client: it may hold a connection for each `kubectl logs`
// in flight (the operator's reads of trainers' logs among them).
constexpr unsigned kConnectionsFromTheApiServer = 64;

std::string SafeName(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c == '/') c = '_';
  }
  return out;
}

// The non-empty segments of a path: "/a//b/c" -> {a, b, c}.
std::vector<std::string> PathSegments(const std::string& path) {
  std::vector<std::string> out;
  std::string segment;
  std::istringstream in(path);
  while (std::getline(in, segment, '/')) {
    if (!segment.empty()) out.push_back(segment);
  }
  return out;
}

// As the kubelet: the last `tail_lines` lines of the log.
void KeepLastLines(std::string& body, int tail_lines) {
  size_t pos = body.size();
  if (!body.empty() && body.back() == '\n') --pos;
  for (int i = 0; i < tail_lines && pos != std::string::npos && pos > 0; ++i) {
    pos = body.rfind('\n', pos - 1);
  }
  if (pos != std::string::npos && pos > 0) body = body.substr(pos + 1);
}

}  // namespace

std::string NodeAgent::LogFile(const std::string& ns, const std::string& pod,
                               const std::string& container) const {
  std::string f = options_.log_dir + "/pods/" + SafeName(ns) + "_" + SafeName(pod) + "_" +
                  SafeName(container) + ".log";
  return fs::exists(f) ? f : "";
}

HttpAnswer NodeAgent::ContainerLog(const HttpRequest& request) const {
  const std::vector<std::string> parts = PathSegments(request.path);
  const std::string f = parts.size() == 4 ? LogFile(parts[1], parts[2], parts[3]) : "";
  if (f.empty()) return {404, "text/plain", "no such container log\n"};
  std::ifstream in(f);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string body = ss.str();
  if (auto it = request.query.find("tailLines"); it != request.query.end()) {
    KeepLastLines(body, std::max(0, std::atoi(it->second.c_str())));
  }
  // As the kubelet: at most limitBytes of the selected output, from its start.
  if (auto it = request.query.find("limitBytes"); it != request.query.end()) {
    const long long limit = std::atoll(it->second.c_str());
    if (limit > 0 && static_cast<size_t>(limit) < body.size()) body.resize(limit);
  }
  return {200, "text/plain", body};
}

void NodeAgent::StartLogServer() {
  auto server = std::make_unique<HttpServer>(options_.host_ip, options_.kubelet_port,
                                             std::map<std::string, HttpServer::Handler>{});
  server->HandlePrefix("/containerLogs/",
                       [this](const HttpRequest& request) { return ContainerLog(request); });
  server->UseTls(options_.tls_cert_file, options_.tls_key_file);
  server->SetConnectionsPerAddress(kConnectionsFromTheApiServer);
  const std::string url =
      "https://" + options_.host_ip + ":" + std::to_string(options_.kubelet_port);
  if (Status s = server->Start(); !s.ok()) {
    log_->Warn("log endpoint " + url +
               " did not start (kubectl logs will not work): " + s.message());
    return;
  }
  log_server_ = std::move(server);
}

void NodeAgent::StopLogServer() { log_server_.reset(); }

}  // namespace tj::processnode
