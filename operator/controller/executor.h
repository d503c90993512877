// The executor: reads one TrainingJob and what it owns from the API server (live reads, not
// the informer cache, so a pass never acts on a stale view), asks the pure reconciler what to
// do, and applies it through kube::Client: creates and deletes, Events, and the status through
// the /status subresource (409 -> re-read the job and write again). Thread-safe as long as
// one key is synced by one thread at a time (the work queue guarantees it).
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/event_log.h"
#include "common/status.h"
#include "operator/controller/metrics.h"
#include "operator/controller/reconciler.h"
#include "operator/kube/client.h"
#include "operator/kube/event_recorder.h"

namespace tj::controller {

struct ExecutorDeps {
  kube::Client* client = nullptr;           // required
  kube::EventRecorder* recorder = nullptr;  // may be null: no Events
  OperatorMetrics* metrics = nullptr;       // may be null
  EventLog* log = nullptr;                  // may be null
  std::function<kube::WallTime()> wall_clock = [] { return std::chrono::system_clock::now(); };
  // GET http://<podIP>:<status port>/status of a running trainer pod; nullopt when it does
  // not answer (quickly: it runs inside a reconcile).
  std::function<std::optional<nlohmann::json>(const nlohmann::json& pod)> trainer_status;
  // The tail of a pod's trainer log; nullopt when it cannot be read.
  std::function<std::optional<std::string>(const std::string& ns, const std::string& pod)> pod_log;
  std::function<std::string()> random_key;  // a fresh rendezvous key
};

class Executor {
 public:
  Executor(ExecutorDeps deps, ReconcilerOptions options);

  // One pass for "namespace/name". Returns when to look again (nullopt: on the next event),
  // or an error (the caller requeues with backoff).
  StatusOr<std::optional<std::chrono::milliseconds>> Sync(const std::string& key);

 private:
  Status Apply(const nlohmann::json& job, const Decision& d);
  Status WriteStatus(const nlohmann::json& job, const nlohmann::json& status);

  ExecutorDeps deps_;
  ReconcilerOptions options_;
};

// The last {"event":"evaluation",...} line of a trainer log, or null.
nlohmann::json LastEvaluation(const std::string& log);

// Fetches GET http://host:port/path with a short timeout (cpprestsdk); nullopt on any error.
std::optional<nlohmann::json> HttpGetJson(const std::string& host, int port,
                                          const std::string& path,
                                          std::chrono::milliseconds timeout);

}  // namespace tj::controller
