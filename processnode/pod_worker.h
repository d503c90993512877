// The pod worker of the process node (node_agent.h): one thread per pod that prepares its
// volumes (pod_volumes.cpp), runs its containers as supervised processes (process.h), probes
// them (probe.h) and reports their states to the API server.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/event_log.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "kube/client.h"
#include "processnode/node_agent.h"
#include "processnode/pod_spec.h"
#include "processnode/probe.h"
#include "processnode/process.h"

namespace tj::processnode {

// What a pod worker uses of its node agent, and nothing more. Everything it points to
// outlives the worker.
struct PodWorkerContext {
  kube::Client* client = nullptr;
  Clock* clock = nullptr;
  EventLog* log = nullptr;
  const NodeAgentOptions* options = nullptr;
  // Rewrites the /etc/hosts of every pod of a namespace (a pod came or went).
  std::function<void(const std::string& ns)> rewrite_hosts_files;
};

// Writes a volume file as the kubelet's atomic writer does: a temporary file renamed over the
// old one, so a reader never sees half a token. Volumes are bind-mounted as directories, so
// the pod sees the new file.
Status WriteVolumeFile(const std::string& path, const std::string& content);

// Runs the containers of one pod and reports their states. One thread per pod. Each
// container runs under a supervisor (process.h) and the worker keeps <pod dir>/state.json
// (pid, start time, restarts): a worker created with that state after a restart of the
// agent adopts the processes that still run instead of starting them again.
class PodWorker {
 public:
  // `adopted`: the pod's state.json from before a restart of the agent, or null.
  PodWorker(PodWorkerContext context, const json& pod, std::string ip, json adopted = nullptr);
  ~PodWorker();

  void Start();

  // The pod has a deletionTimestamp (or is gone): stop its containers within `grace_s`.
  void RequestDelete(int grace_s);
  void MarkGone();
  // The agent stops (node shutdown): stop the containers, within the pod's grace period
  // but at most `max_grace_s`, and keep state.json, so that the next agent reports how they
  // ended and applies the restart policy.
  void StopForAgentShutdown(int max_grace_s);

  const std::string& pod_namespace() const { return namespace_; }
  HostEntry Entry() const { return {pod_ip_, hostname_, subdomain_, namespace_}; }
  const std::string& hosts_file() const { return hosts_file_; }
  std::string hostname() const { return hostname_; }
  const std::string& pod_ip() const { return pod_ip_; }
  std::string LogFile(const std::string& container) const;

 private:
  struct Container {
    json spec;
    ContainerState state;
    ProcessSpec process;
    pid_t pid = 0;                       // the supervisor's, also the process group's
    unsigned long long start_ticks = 0;  // ProcessStartTime(pid): guards against pid reuse
    bool config_ok = false;
    bool done = false;
    Clock::TimePoint restart_at{};
    ExponentialBackoff backoff{std::chrono::seconds(1), std::chrono::seconds(30)};
    // The probes of the current run (reset at each start).
    std::optional<ProbeTracker> startup, liveness, readiness;
  };

  void Warn(const std::string& m);

  // Reads a key of a Secret or ConfigMap for env and volumes.
  StatusOr<std::string> Lookup(const std::string& kind, const std::string& name,
                               const std::string& key);

  // Prepares a volume's directory; returns it.
  StatusOr<std::string> PrepareVolume(const json& v);

  // Secret or ConfigMap data (decoded). The kube-root-ca.crt ConfigMap appears a moment after
  // its namespace (root-ca-cert-publisher): wait for it a little before giving up.
  StatusOr<json> ObjectData(const std::string& kind, const std::string& obj_name);

  // One source of a projected volume: secret, configMap, downwardAPI or serviceAccountToken.
  Status WriteProjection(const std::string& dir, const json& source);

  // A projected service-account token: where it is written and when to renew it.
  struct TokenFile {
    std::string path;
    json projection;
    Clock::TimePoint refresh_at;
  };

  // Asks the API server for a token bound to this pod (TokenRequest) and writes it.
  Status RequestToken(TokenFile* t);

  void RefreshTokens();

  Status Prepare();

  std::string ExitFile(const std::string& container) const;
  std::string StateFile() const { return dir_ + "/state.json"; }

  // Records what a restarted agent needs to adopt the pod's processes.
  void SaveState();

  // Takes over a container from the state of the previous agent: still running (the same
  // pid and start time; the main loop notices when it ends, from its exit file), or ended
  // for good. false when there is nothing to adopt (the container is to be started).
  bool Adopt(Container& c);

  // Non-blocking: whether the container's process ended, and how.
  bool Poll(const Container& c, ExitInfo* info);

  void PostStatus();

  void Launch(Container& c);

  // The probes of a new (or adopted) run of the container, from its spec.
  void StartProbes(Container& c);

  // Runs the probes that are due; returns true when the container's status changed. A failed
  // startup or liveness probe kills the container; the restart policy decides what follows.
  bool RunProbes(Container& c);

  void Run();

  // Graceful stop: SIGTERM, up to the grace period, SIGKILL; then the final delete.
  void Finish();

  const PodWorkerContext context_;
  json pod_;
  std::string pod_ip_, namespace_, name_, uid_, hostname_, subdomain_, dir_, hosts_file_,
      start_time_;
  json adopted_;                       // state.json of the previous agent, or null
  std::vector<Container> containers_;  // only the worker thread touches these
  std::vector<std::string> created_mount_points_;
  std::vector<TokenFile> tokens_;  // only the worker thread touches these
  bool status_pending_ = false;    // the last status was not taken; worker thread only
  Clock::TimePoint status_retry_at_{};
  Mutex mu_;
  std::condition_variable_any cv_;
  bool delete_requested_ TJ_GUARDED_BY(mu_) = false;
  bool gone_ TJ_GUARDED_BY(mu_) = false;
  bool keep_state_ TJ_GUARDED_BY(mu_) = false;
  int grace_s_ TJ_GUARDED_BY(mu_) = 30;
  std::jthread thread_;
};

}  // namespace tj::processnode
