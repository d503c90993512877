// What the operator reads from a job's own pods, which the job's tenant controls: the
// trainer's /status (bounded: HttpGetJson) and the trainers' logs through the API server (the
// last 50 lines, at most 64 KiB, within the log transport's timeout), and how each is parsed:
// bounded in size and nesting, only the fields of the schema (common/status_schema.h) taken.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status_schema.h"
#include "kube/config.h"
#include "kube/http_transport.h"
#include "operator/controller/pod_view.h"

namespace tj::controller {

// The last {"event":"evaluation",...} line of a trainer log, or null.
nlohmann::json LastEvaluation(const std::string& log);

// The chief's final progress from its log, in /status's schema: the last epoch_end line's
// epoch, loss, accuracy and images_per_sec, and train_end's epochs as total_epochs; null when
// the log has neither.
nlohmann::json FinalProgress(const std::string& log);

// What the operator reads of a trainer's /status, which the job's tenant controls: at most
// this many bytes, nested at most this deep (the schema, common/status_schema.h, is two
// levels deep).
inline constexpr size_t kMaxTrainerStatusBytes = status_schema::kMaxBytes;
inline constexpr size_t kMaxTrainerStatusNesting = status_schema::kMaxNesting;

// A JSON text a tenant wrote (its /status, a line of its log), parsed only when nested at most
// kMaxTrainerStatusNesting deep; `discarded` when deeper or not JSON, so that neither the
// parser nor the destructor of what it built recurses as deep as the tenant likes.
nlohmann::json ParseTenantJson(const std::string& text);

// GET http://host:port/path of a pod (kube::BoundedGet: the whole exchange within `timeout`,
// at most kMaxTrainerStatusBytes), parsed when it is a JSON object nested at most
// kMaxTrainerStatusNesting deep; nullopt otherwise.
std::optional<nlohmann::json> HttpGetJson(const std::string& host, int port,
                                          const std::string& path,
                                          std::chrono::milliseconds timeout);

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
