// Container probes as a kubelet runs them: startup, liveness and readiness, each an httpGet
// (HTTP or HTTPS without certificate checks), tcpSocket or exec check, with initial delay,
// period, timeout and success/failure thresholds. ParseProbe and ProbeTracker are pure (the
// tracker takes the time as an argument); RunProbe does the network or process work.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace tj::processnode {

using nlohmann::json;

struct Probe {
  enum class Kind { kHttpGet, kTcpSocket, kExec };
  Kind kind = Kind::kTcpSocket;
  std::string scheme = "HTTP";  // httpGet: HTTP or HTTPS
  std::string host;             // empty: the pod's IP
  std::string path = "/";
  int port = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::string> command;  // exec
  std::chrono::seconds initial_delay{0};
  std::chrono::seconds period{10};
  std::chrono::seconds timeout{1};
  int success_threshold = 1;
  int failure_threshold = 3;
};

// A core/v1 Probe of `container`; a named port is looked up in the container's ports. Errors
// name the container, the probe and the field.
StatusOr<Probe> ParseProbe(const json& probe, const json& container, const std::string& which);

// Consecutive results of one probe of one container run, and when it is next due.
class ProbeTracker {
 public:
  ProbeTracker(Probe probe, Clock::TimePoint started)
      : probe_(std::move(probe)), next_(started + probe_.initial_delay) {}

  const Probe& probe() const { return probe_; }
  bool Due(Clock::TimePoint now) const { return now >= next_; }
  void Record(bool ok, Clock::TimePoint now);
  // Success: success_threshold consecutive successes, and no failure since.
  bool succeeded() const { return succeeded_; }
  // Failure: failure_threshold consecutive failures.
  bool failed() const { return failures_ >= probe_.failure_threshold; }

 private:
  Probe probe_;
  Clock::TimePoint next_;
  int successes_ = 0, failures_ = 0;
  bool succeeded_ = false;
};

// Runs the probe once. httpGet succeeds on a status 200-399, tcpSocket when it connects, exec
// when the command exits 0 (run in the mount namespace of `container_pid` when
// `mount_namespace`, with the container's `env` and `working_dir`). `detail` says why not.
bool RunProbe(const Probe& probe, const std::string& pod_ip, const std::vector<std::string>& env,
              const std::string& working_dir, bool mount_namespace, pid_t container_pid,
              std::string* detail);

}  // namespace tj::processnode
