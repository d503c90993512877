// tj-process-node: a node agent standing in for a kubelet on one machine. It registers a Ready
// Node with the machine's capacity, renews its Lease and status, and runs every pod bound to
// it as local processes (see pod_spec.h for what it takes from the spec and process.h for
// how a container runs). Each pod gets a loopback address 127.0.x.y as its IP and, as root,
// a private /etc/hosts naming the namespace's pods. Restart policies, exit codes and graceful
// deletion behave as with a kubelet; logs go to <log-dir>/pods/ and to `kubectl logs`
// through the kubelet log endpoint it serves.
//
// Restarts: as a kubelet's, the pods' processes outlive the agent when it dies (SIGKILL, a
// crash): the next agent adopts them from <state-dir>/pods/<uid>/state.json, keeps reporting
// them and learns how they end from the exit file their supervisor writes, and kills those
// whose pod was deleted meanwhile. SIGTERM/SIGINT is a node shutdown: the pods' processes
// are stopped and the next agent reports them terminated (exit code 143), so the restart
// policy, and the operator above it, decide what follows.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/event_log.h"
#include "common/http_server.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "processnode/pod_spec.h"

namespace tj::processnode {

struct NodeAgentOptions {
  std::string node_name = "local-node";
  std::string state_dir;  // volumes, hosts files
  std::string log_dir;    // pods/<ns>_<pod>_<container>.log
  std::string bin_dir;    // where tj-trainer and tj-operator are
  std::string host_ip = "127.0.0.1";
  // The API server's URL as pods reach it: KUBERNETES_SERVICE_HOST/_PORT (none when empty).
  std::string api_server;
  int kubelet_port = 0;                     // the log endpoint's port (0: none)
  std::string tls_cert_file, tls_key_file;  // for the log endpoint
  std::chrono::seconds heartbeat{10};
  bool mount_namespace = false;  // private /etc/hosts and bind mounts (needs root)
  int pod_network = 0;           // pods get 127.<pod_network>.x.y (LoopbackAddress)
  // The Node's kubeletVersion and kubeProxyVersion: the cluster's release, as a kubelet of
  // that release reports it.
  std::string kubelet_version = "v0.0.0-tj-process-node";
  std::chrono::milliseconds restart_backoff_min{1000};
  std::chrono::milliseconds restart_backoff_max{30000};
};

class PodWorker;
struct PodWorkerContext;

class NodeAgent {
 public:
  // `client`, `clock` and `log` must outlive the agent.
  NodeAgent(kube::Client* client, Clock* clock, NodeAgentOptions options, EventLog* log);
  ~NodeAgent();

  // Creates or updates the Node (Ready, capacity, addresses, kubelet port) and clears the
  // not-ready taint.
  Status Register();
  // Runs until `stop`: heartbeats, pod informer, pod workers. Stops all pods on the way out.
  Status Run(const std::stop_token& stop);

  // For the log endpoint: the log file of a container, or "" when unknown.
  std::string LogFile(const std::string& ns, const std::string& pod,
                      const std::string& container) const;

 private:
  Status Heartbeat();
  void OnPod(const nlohmann::json& pod);
  void OnPodDeleted(const nlohmann::json& pod);
  void RewriteHostsFiles(const std::string& ns);
  // What the pod workers use of the agent (pod_worker.h).
  PodWorkerContext WorkerContext();
  // Binds an unbound PersistentVolumeClaim to a new hostPath PersistentVolume (a directory
  // under <state-dir>/pvc/<ns>/<claim>), so the scheduler can place pods that use it.
  void ProvisionClaim(const nlohmann::json& pvc);
  std::string AllocateIp() TJ_REQUIRES(mu_);
  // Reads the states the previous agent left (pods to adopt) into adoptable_.
  void LoadPodStates();
  // After the first pod list: kills the processes of states no pod claimed, removes them.
  void StopOrphans();
  nlohmann::json NodeObject() const;
  // The kubelet log endpoint (log_server.cpp): GET /containerLogs/<ns>/<pod>/<container>.
  void StartLogServer();
  void StopLogServer();
  HttpAnswer ContainerLog(const HttpRequest& request) const;

  kube::Client* client_;
  Clock* clock_;
  NodeAgentOptions options_;
  EventLog* log_;
  std::unique_ptr<kube::Informer> pods_;
  std::unique_ptr<kube::Informer> claims_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<PodWorker>> workers_ TJ_GUARDED_BY(mu_);  // by pod uid
  int next_ip_ TJ_GUARDED_BY(mu_) = 0;
  std::map<std::string, nlohmann::json> adoptable_ TJ_GUARDED_BY(mu_);  // by pod uid
  std::unique_ptr<HttpServer> log_server_;
};

}  // namespace tj::processnode
