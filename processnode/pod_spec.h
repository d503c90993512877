// What the process node agent derives from a Pod, without running anything: the executable and
// arguments of each container (images without a command map to local executables), the
// environment (literal values, fieldRef, secretKeyRef, configMapKeyRef), the /etc/hosts of
// the pod, and the pod status to report from container states. Pure, so it is unit-tested.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::processnode {

using nlohmann::json;

// Maps an image to an executable for containers without a command: an image whose name ends
// in "tj-trainer", "tj-trainer-cpu" or "tj-operator" (any registry, any tag) runs that
// binary (tj-trainer for both trainer images) from `bin_dir`;
// "busybox"/"debian"/"ubuntu"/"alpine"-like images without a command run /bin/sh.
std::optional<std::string> ExecutableForImage(const std::string& image, const std::string& bin_dir);

// argv of a container: command + args, or the image's executable + args.
StatusOr<std::vector<std::string>> ContainerArgv(const json& container, const std::string& bin_dir);

// command and args with $(VAR) expanded from the container's environment (NAME=value), as
// the kubelet does; $$(VAR) is a literal $(VAR), unknown references stay as they are.
std::vector<std::string> ExpandArgs(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env);

// Looks up a key of a Secret or ConfigMap in the pod's namespace: (kind, name, key) -> value.
using KeyLookup = std::function<StatusOr<std::string>(
    const std::string& kind, const std::string& name, const std::string& key)>;

// The container's environment as NAME=value, in spec order; $(VAR) references to earlier
// variables are expanded as the kubelet does.
StatusOr<std::vector<std::string>> ContainerEnv(const json& pod, const json& container,
                                                const std::string& pod_ip,
                                                const std::string& node_name,
                                                const KeyLookup& lookup);

// The value of a downward-API fieldRef (metadata.name, metadata.namespace, metadata.uid,
// labels/annotations['k'], spec.nodeName, spec.serviceAccountName, status.podIP/hostIP).
StatusOr<std::string> PodFieldValue(const json& pod, const std::string& field_path,
                                    const std::string& pod_ip, const std::string& node_name);

// "127.<network>.x.y" for the n-th pod (n >= 0): x in 1..254, y in 2..254. Clusters on one
// machine use different networks (0..255), so their pods never share an address and port.
std::string LoopbackAddress(int n, int network = 0);

// /etc/hosts of a pod: localhost, the pod's own name, and every known pod of its namespace
// that has hostname and subdomain as <hostname>.<subdomain>.<ns>.svc[.cluster.local].
struct HostEntry {
  std::string ip, hostname, subdomain, ns;
};
std::string HostsFile(const std::string& own_ip, const std::string& own_hostname,
                      const std::vector<HostEntry>& peers);

// State of one container as the agent tracks it.
struct ContainerState {
  std::string name;
  enum class Phase { kWaiting, kRunning, kTerminated } phase = Phase::kWaiting;
  std::string reason;  // waiting/terminated reason
  std::string message;
  int exit_code = 0;
  int signal = 0;
  int restart_count = 0;
  std::string started_at, finished_at;  // metav1.Time
  json last_terminated;                 // the previous run's terminated state, or null
  bool started = true;                  // its startup probe passed (or it has none)
  bool probe_ready = true;              // its readiness probe passes (or it has none)
};

// The pod's phase from its containers and restart policy (Pending, Running, Succeeded,
// Failed), as the kubelet computes it.
std::string PodPhase(const std::vector<ContainerState>& containers,
                     const std::string& restart_policy);

// status for the pod: phase, podIP(s), hostIP, startTime, conditions (Initialized,
// ContainersReady, Ready, PodScheduled) and containerStatuses.
json PodStatus(const json& pod, const std::vector<ContainerState>& containers,
               const std::string& pod_ip, const std::string& host_ip, const std::string& start_time,
               const std::string& now);

}  // namespace tj::processnode
