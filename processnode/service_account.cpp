#include "processnode/service_account.h"

#include <algorithm>

namespace tj::processnode {

std::string TokenRequestPath(const json& pod) {
  const json md = pod.value("metadata", json::object());
  std::string sa = pod.value("spec", json::object()).value("serviceAccountName", "");
  if (sa.empty()) sa = pod.value("spec", json::object()).value("serviceAccount", "");
  if (sa.empty()) sa = "default";
  return "/api/v1/namespaces/" + md.value("namespace", "default") + "/serviceaccounts/" + sa +
         "/token";
}

json TokenRequestBody(const json& pod, const json& projection) {
  const json md = pod.value("metadata", json::object());
  int seconds = projection.value("expirationSeconds", kDefaultTokenSeconds);
  seconds = std::max(seconds, kMinTokenSeconds);
  json spec = {{"expirationSeconds", seconds},
               {"boundObjectRef",
                {{"apiVersion", "v1"},
                 {"kind", "Pod"},
                 {"name", md.value("name", "")},
                 {"uid", md.value("uid", "")}}}};
  // No audience: the API server's own (--api-audiences, else its issuer), as a kubelet does.
  std::string audience = projection.value("audience", "");
  spec["audiences"] = audience.empty() ? json::array() : json::array({audience});
  return {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"}, {"spec", spec}};
}

std::chrono::seconds TokenRefreshAfter(std::chrono::seconds lifetime) {
  return std::chrono::seconds(lifetime.count() * 8 / 10);
}

StatusOr<std::vector<std::string>> KubernetesServiceEnv(const std::string& server_url) {
  std::string rest = server_url;
  std::string scheme = "https";
  if (auto p = rest.find("://"); p != std::string::npos) {
    scheme = rest.substr(0, p);
    rest = rest.substr(p + 3);
  }
  if (auto slash = rest.find('/'); slash != std::string::npos) rest = rest.substr(0, slash);
  std::string host, port;
  if (!rest.empty() && rest.front() == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos) {
      return Status::Error("API server URL " + server_url + ": unterminated IPv6 address");
    }
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  } else {
    host = rest;
  }
  if (port.empty()) port = scheme == "http" ? "80" : "443";
  if (host.empty() || port.find_first_not_of("0123456789") != std::string::npos) {
    return Status::Error("API server URL " + server_url +
                         " has no host:port; pass the API server as https://HOST:PORT");
  }
  const std::string addr = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  const std::string tcp = "tcp://" + addr + ":" + port;
  return std::vector<std::string>{"KUBERNETES_SERVICE_HOST=" + host,
                                  "KUBERNETES_SERVICE_PORT=" + port,
                                  "KUBERNETES_SERVICE_PORT_HTTPS=" + port,
                                  "KUBERNETES_PORT=" + tcp,
                                  "KUBERNETES_PORT_" + port + "_TCP=" + tcp,
                                  "KUBERNETES_PORT_" + port + "_TCP_PROTO=tcp",
                                  "KUBERNETES_PORT_" + port + "_TCP_PORT=" + port,
                                  "KUBERNETES_PORT_" + port + "_TCP_ADDR=" + host};
}

std::string ServiceAccountKubeconfig(const std::string& server_url, const std::string& ca_file,
                                     const std::string& token_file, const std::string& ns) {
  // JSON is YAML; json::dump quotes every string correctly.
  json kc = {
      {"apiVersion", "v1"},
      {"kind", "Config"},
      {"clusters",
       json::array({{{"name", "in-cluster"},
                     {"cluster", {{"server", server_url}, {"certificate-authority", ca_file}}}}})},
      {"users",
       json::array({{{"name", "service-account"}, {"user", {{"tokenFile", token_file}}}}})},
      {"contexts",
       json::array(
           {{{"name", "in-cluster"},
             {"context",
              {{"cluster", "in-cluster"}, {"user", "service-account"}, {"namespace", ns}}}}})},
      {"current-context", "in-cluster"}};
  return kc.dump(2) + "\n";
}

bool MountsServiceAccount(const json& container) {
  for (const auto& m : container.value("volumeMounts", json::array())) {
    std::string p = m.value("mountPath", "");
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    if (p == kServiceAccountMountPath) return true;
  }
  return false;
}

}  // namespace tj::processnode
