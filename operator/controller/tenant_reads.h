// What the operator reads from a job's own pods, which the job's tenant controls: the
// trainer's /status (bounded: executor.h's HttpGetJson) and the evaluator's log through the
// API server (its last 50 lines, at most 64 KiB, within the log transport's timeout).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kube/config.h"
#include "kube/http_transport.h"
#include "operator/controller/pod_view.h"

namespace tj::controller {

// GET /status of the pod's trainer (its pod IP and status port) within 1.5 s; nullopt when the
// pod has no address or port yet, or the answer is not a bounded JSON object.
std::optional<nlohmann::json> ReadTrainerStatus(const PodView& pod);

// Reads pod logs through a transport of its own. Thread-safe: the transport is.
class PodLogReader {
 public:
  PodLogReader(kube::RestConfig config, std::unique_ptr<kube::HttpTransport> transport)
      : config_(std::move(config)), transport_(std::move(transport)) {}

  // The last 50 lines (at most 64 KiB) of the log of the pod's `container` (the API server's
  // default, which fails for a pod of several containers, when empty); nullopt on any error.
  std::optional<std::string> Read(const std::string& ns, const std::string& pod,
                                  const std::string& container) const;

 private:
  kube::RestConfig config_;
  std::unique_ptr<kube::HttpTransport> transport_;
};

}  // namespace tj::controller
