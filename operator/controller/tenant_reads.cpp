#include "operator/controller/tenant_reads.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "operator/controller/executor.h"
#include "operator/controller/job_resources.h"

namespace tj::controller {

std::optional<nlohmann::json> ReadTrainerStatus(const PodView& pod) {
  if (pod.pod_ip.empty() || !pod.status_port) return std::nullopt;
  return HttpGetJson(pod.pod_ip, *pod.status_port, "/status", std::chrono::milliseconds(1500));
}

std::optional<std::string> PodLogReader::Read(const std::string& ns, const std::string& pod,
                                              const std::string& container) const {
  std::string token = config_.bearer_token;
  if (!config_.token_file.empty()) {  // re-read: a projected token rotates
    std::ifstream f(config_.token_file);
    std::stringstream ss;
    ss << f.rdbuf();
    token = ss.str();
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  }
  kube::HttpRequest req;
  req.method = "GET";
  // The log is the tenant's: its last 50 lines, at most 64 KiB of them.
  req.path_and_query =
      "/api/v1/namespaces/" + ns + "/pods/" + pod + "/log?tailLines=50&limitBytes=65536";
  if (!container.empty()) req.path_and_query += "&container=" + container;
  if (!token.empty()) req.authorization = "Bearer " + token;
  auto r = transport_->Send(req);
  if (!r.ok() || r->status != 200) return std::nullopt;
  return r->body;
}

}  // namespace tj::controller
