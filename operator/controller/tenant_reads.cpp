#include "operator/controller/tenant_reads.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "common/json_nesting.h"
#include "common/status_schema.h"
#include "kube/bounded_get.h"
#include "kube/object_meta.h"
#include "operator/controller/job_resources.h"

namespace tj::controller {

using nlohmann::json;
using std::chrono::milliseconds;

json LastEvaluation(const std::string& log) {
  std::istringstream in(log);
  std::string line;
  json last;
  while (std::getline(in, line)) {
    if (line.find("\"evaluation\"") == std::string::npos) continue;
    json j = ParseTenantJson(line);
    if (kube::TextOf(j, "event") == "evaluation" && j.contains("checkpoint")) {
      last = j;
    }
  }
  return last;
}

json ParseTenantJson(const std::string& text) {
  if (JsonNesting(text) > kMaxTrainerStatusNesting) return json::value_t::discarded;
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::optional<json> HttpGetJson(const std::string& host, int port, const std::string& path,
                                milliseconds timeout) {
  kube::BoundedGetLimits limits;
  limits.timeout = timeout;
  limits.max_bytes = kMaxTrainerStatusBytes;
  auto body = kube::BoundedGet(host, port, path, limits);
  if (!body.ok()) return std::nullopt;
  json j = ParseTenantJson(*body);
  if (!j.is_object()) return std::nullopt;
  return j;
}

json FinalProgress(const std::string& log) {
  std::istringstream in(log);
  std::string line;
  json progress;
  while (std::getline(in, line)) {
    if (line.find("\"epoch_end\"") == std::string::npos &&
        line.find("\"train_end\"") == std::string::npos) {
      continue;
    }
    json j = ParseTenantJson(line);
    const std::string event = kube::TextOf(j, "event");  // a program's own lines: any types
    if (event == "epoch_end") {
      json p = json::object();
      for (const char* k : {status_schema::kEpoch.key, status_schema::kLoss.key,
                            status_schema::kAccuracy.key, status_schema::kImagesPerSec.key}) {
        if (j.contains(k)) p[k] = j[k];
      }
      if (progress.is_object() && progress.contains(status_schema::kTotalEpochs.key)) {
        p[status_schema::kTotalEpochs.key] = progress[status_schema::kTotalEpochs.key];
      }
      progress = std::move(p);
    } else if (event == "train_end" && j.contains("epochs")) {
      if (!progress.is_object()) progress = json::object();
      progress[status_schema::kTotalEpochs.key] = j["epochs"];
      progress[status_schema::kState.key] = "done";
    }
  }
  return progress;
}

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
