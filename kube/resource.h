// Names a kind of object on the API server and builds its REST paths, for any group, version
// and resource: core ("v1", "pods") -> /api/v1/..., others ("coordination.k8s.io/v1",
// "leases") -> /apis/coordination.k8s.io/v1/....
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace tj::kube {

struct Resource {
  std::string api_version;  // "v1", "apps/v1", "tjo.dev/v1alpha1"
  std::string plural;       // "pods", "leases", "trainingjobs"
  bool namespaced = true;

  // ns empty: all namespaces (lists and watches) or a cluster-scoped object.
  std::string Path(const std::string& ns = "", const std::string& name = "",
                   const std::string& subresource = "") const;
};

// Well-known resources.
namespace resources {
inline const Resource kPods{"v1", "pods"};
inline const Resource kServices{"v1", "services"};
inline const Resource kSecrets{"v1", "secrets"};
inline const Resource kConfigMaps{"v1", "configmaps"};
inline const Resource kEvents{"v1", "events"};
inline const Resource kNamespaces{"v1", "namespaces", false};
inline const Resource kNodes{"v1", "nodes", false};
inline const Resource kPersistentVolumes{"v1", "persistentvolumes", false};
inline const Resource kPersistentVolumeClaims{"v1", "persistentvolumeclaims"};
inline const Resource kLeases{"coordination.k8s.io/v1", "leases"};
inline const Resource kNetworkPolicies{"networking.k8s.io/v1", "networkpolicies"};
inline const Resource kCustomResourceDefinitions{"apiextensions.k8s.io/v1",
                                                 "customresourcedefinitions", false};
}  // namespace resources

// Percent-encodes a query parameter value.
std::string UrlEncode(const std::string& s);

// "namespace/name" (or "name" for cluster-scoped objects): the key of caches and work queues.
std::string ObjectKey(const nlohmann::json& object);
std::string ObjectKey(const std::string& ns, const std::string& name);
// The inverse: {namespace, name}; a key without "/" is {"", key}.
std::pair<std::string, std::string> SplitObjectKey(const std::string& key);

}  // namespace tj::kube
