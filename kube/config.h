// Where the API server is and how to authenticate to it: from a kubeconfig file (client-go's
// precedence: --kubeconfig, then $KUBECONFIG, then ~/.kube/config) or from inside a pod
// (service-account token, CA bundle, KUBERNETES_SERVICE_HOST/_PORT). Environment and file
// system root are passed in so tests control them.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tj::kube {

struct RestConfig {
  std::string server;  // "https://host:port" (IPv6 hosts in brackets), no trailing slash
  std::string ca_pem;  // CAs to trust; empty: the system's trust store
  bool insecure_skip_tls_verify = false;
  std::string bearer_token;
  std::string token_file;  // re-read when it changes (rotated service-account tokens)
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string default_namespace = "default";
  double qps = 5;  // client-side rate limit (client-go's defaults); qps <= 0: none
  int burst = 10;
  int max_retries = 5;               // for 429, 5xx and (GETs only) transport errors
  std::chrono::seconds timeout{30};  // per request, not per watch
  std::string user_agent = "tj-operator";
};

// getenv() as a function, so tests pass their own environment.
using Environment = std::function<std::optional<std::string>(const std::string& name)>;
Environment ProcessEnvironment();

// Parses kubeconfig YAML. Relative file paths (certificate-authority, client-certificate,
// client-key, tokenFile) are resolved against `base_dir`. `context` empty: current-context.
StatusOr<RestConfig> ParseKubeconfig(std::string_view yaml, const std::string& base_dir,
                                     const std::string& context = "");
StatusOr<RestConfig> LoadKubeconfigFile(const std::string& path, const std::string& context = "");

// The configuration a pod gets: token and CA under `sa_dir`, namespace from its file.
StatusOr<RestConfig> InClusterConfig(
    const Environment& env,
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// client-go's order: `kubeconfig_flag` when set; else the first existing file in $KUBECONFIG
// (a colon-separated list; files are not merged); else ~/.kube/config when it exists; else
// in-cluster. The error says everything that was tried.
StatusOr<RestConfig> LoadConfig(const std::string& kubeconfig_flag, const Environment& env);

// Base64 (standard alphabet, padding optional). nullopt on bad input.
std::optional<std::string> Base64Decode(std::string_view in);
std::string Base64Encode(std::string_view in);

}  // namespace tj::kube
