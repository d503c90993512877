// The NetworkPolicy the operator makes for each TrainingJob (owned by the job, so it goes with
// it): the job's pods admit TCP from the same job's pods on every port and from the operator's
// pods on the job's status ports, nothing else. A pure function, like job_resources.h.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/status.h"
#include "operator/api/training_job.h"

namespace tj::controller {

// Where the operator's pods are, so that a job's policy admits them to the status ports
// (--network-policy-operator-namespace and --network-policy-operator-labels; the chart passes
// its release namespace and the Deployment's selector labels).
struct NetworkPolicySettings {
  std::string operator_namespace;
  std::map<std::string, std::string> operator_labels;
};

// "<job>-pods".
std::string NetworkPolicyName(const std::string& job);

// The ports the operator reads the job's trainers' /status on, as BuildPod gives them: for a
// replica type whose TF_CONFIG container sets --status-port or a literal TJ_STATUS_PORT, that
// port; where it sets TJ_STATUS_PORT from elsewhere (valueFrom), none (the operator cannot
// know it, so does not read it); otherwise kDefaultStatusPort + the replica's ordinal.
std::set<int> StatusPorts(const api::TrainingJobSpec& spec);

// The job's NetworkPolicy: selects the pods labelled tjo.dev/job-name=<job>; admits TCP on
// every port from pods with that label in the job's namespace, and from pods with
// settings.operator_labels in settings.operator_namespace (by the namespace label
// kubernetes.io/metadata.name) on each of StatusPorts, one entry per port (no endPort, which
// some network plugins ignore). Labelled tjo.dev/job-name (the operator's informer watches it
// by that label) and owned by the job (controller owner reference).
nlohmann::json BuildNetworkPolicy(const nlohmann::json& job, const api::TrainingJobSpec& spec,
                                  const NetworkPolicySettings& settings);

// "k=v,k2=v2" as a label map; an error naming the entry that is not "key=value" or a map
// without entries.
StatusOr<std::map<std::string, std::string>> ParseLabels(const std::string& text);

}  // namespace tj::controller
