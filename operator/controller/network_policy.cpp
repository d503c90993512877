#include "operator/controller/network_policy.h"

#include <algorithm>
#include <utility>

#include "operator/controller/job_resources.h"

namespace tj::controller {

using nlohmann::json;

namespace {

// Whether `container` sets `name` in its env at all (a literal value or valueFrom).
bool SetsEnv(const json& container, const char* name) {
  auto env = container.find("env");
  if (env == container.end() || !env->is_array()) return false;
  for (const json& e : *env) {
    if (e.is_object() && e.value("name", "") == name) return true;
  }
  return false;
}

}  // namespace

std::string NetworkPolicyName(const std::string& job) { return job + "-pods"; }

std::set<int> StatusPorts(const api::TrainingJobSpec& spec) {
  std::set<int> ports;
  for (const auto& [type, rs] : spec.replica_specs) {
    const json& tmpl = rs.pod_template;
    if (const auto port = StatusPortOf(tmpl)) {  // the template's own: every replica of it
      ports.insert(*port);
      continue;
    }
    const json* pod_spec = tmpl.is_object() && tmpl.contains("spec") ? &tmpl["spec"] : nullptr;
    const int ci = pod_spec != nullptr ? TrainerContainerIndex(*pod_spec) : -1;
    if (ci >= 0) {
      const json& c = (*pod_spec)["containers"][ci];
      if (SetsEnv(c, kStatusPortEnv) || !StatusPortArg(c).empty()) continue;  // not known
    }
    // BuildPod's default: the replica's place in TF_CONFIG's cluster.
    int first = 0;
    if (type != api::ReplicaType::kChief) first += spec.Replicas(api::ReplicaType::kChief);
    if (type == api::ReplicaType::kEvaluator) first += spec.Replicas(api::ReplicaType::kWorker);
    for (int i = 0; i < rs.replicas; ++i) ports.insert(kDefaultStatusPort + first + i);
  }
  return ports;
}

json BuildNetworkPolicy(const json& job, const api::TrainingJobSpec& spec,
                        const NetworkPolicySettings& settings) {
  const api::ObjectRef r = api::RefOf(job);
  const json job_pods = {{"matchLabels", {{api::kLabelJobName, r.name}}}};
  json ingress = json::array();
  // The job's own pods, every TCP port: the rendezvous on spec.port, and the ring, the
  // peer-health responder, NCCL's and Gloo's sockets on ports the kernel picks.
  ingress.push_back({{"from", json::array({{{"podSelector", job_pods}}})},
                     {"ports", json::array({{{"protocol", "TCP"}}})}});
  json status_ports = json::array();
  for (int port : StatusPorts(spec)) status_ports.push_back({{"protocol", "TCP"}, {"port", port}});
  if (!status_ports.empty()) {
    json operator_pods = json::object();
    for (const auto& [k, v] : settings.operator_labels) operator_pods[k] = v;
    ingress.push_back(
        {{"from",
          json::array(
              {{{"namespaceSelector",
                 {{"matchLabels", {{"kubernetes.io/metadata.name", settings.operator_namespace}}}}},
                {"podSelector", {{"matchLabels", std::move(operator_pods)}}}}})},
         {"ports", std::move(status_ports)}});
  }
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata",
           {{"name", NetworkPolicyName(r.name)},
            {"namespace", r.ns},
            {"labels", {{api::kLabelJobName, r.name}}},
            {"ownerReferences", json::array({OwnerReference(job)})}}},
          {"spec",
           {{"podSelector", job_pods},
            {"policyTypes", json::array({"Ingress"})},
            {"ingress", std::move(ingress)}}}};
}

StatusOr<std::map<std::string, std::string>> ParseLabels(const std::string& text) {
  std::map<std::string, std::string> labels;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string entry = text.substr(start, end - start);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::Error("label \"" + entry + "\" in \"" + text + "\" is not key=value");
    }
    labels[entry.substr(0, eq)] = entry.substr(eq + 1);
    start = end + 1;
  }
  if (labels.empty()) return Status::Error("no labels in \"" + text + "\"");
  return labels;
}

}  // namespace tj::controller
