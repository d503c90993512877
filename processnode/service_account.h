// What a kubelet gives a pod for in-cluster configuration, as pure functions: the TokenRequest
// for a projected serviceAccountToken, the KUBERNETES_SERVICE_* environment for the API
// server's address, and (for pods run without a mount namespace, where nothing can be mounted
// at /var/run/secrets/kubernetes.io/serviceaccount) a kubeconfig pointing at the per-pod copy
// of token and ca.crt. The API calls themselves are made by the node agent.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::processnode {

using nlohmann::json;

// Where in-cluster clients (client-go, kube's InClusterConfig) look.
inline constexpr char kServiceAccountMountPath[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// The kubelet's default and minimum token lifetimes (seconds).
inline constexpr int kDefaultTokenSeconds = 3600;
inline constexpr int kMinTokenSeconds = 600;

// POST path of the TokenRequest subresource of the pod's service account
// (spec.serviceAccountName, else "default").
std::string TokenRequestPath(const json& pod);

// The authentication.k8s.io/v1 TokenRequest for a `serviceAccountToken` projection
// ({audience, expirationSeconds, path}), bound to the pod (name and uid), so the token dies
// with the pod.
json TokenRequestBody(const json& pod, const json& projection);

// When to renew a token that lives `lifetime`: after 80% of it, as the kubelet does.
std::chrono::seconds TokenRefreshAfter(std::chrono::seconds lifetime);

// KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT and KUBERNETES_PORT(_443_TCP...) as
// NAME=value for an API server URL such as "https://127.0.0.1:6443" or "https://[::1]:6443".
StatusOr<std::vector<std::string>> KubernetesServiceEnv(const std::string& server_url);

// A kubeconfig for a pod without a mount namespace: server, the CA file and the token file
// (re-read by clients when it rotates), and the pod's namespace.
std::string ServiceAccountKubeconfig(const std::string& server_url, const std::string& ca_file,
                                     const std::string& token_file, const std::string& ns);

// True when the container mounts something at kServiceAccountMountPath.
bool MountsServiceAccount(const json& container);

}  // namespace tj::processnode
