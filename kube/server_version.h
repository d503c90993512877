// The API server's version (GET /version) and the oldest one the operator runs against.
// The operator reads it once at start and refuses a server older than kMinimumServerVersion
// with a message naming both; the end-to-end tests read it to skip what an older server
// cannot do. Parsing is pure and table-tested (tests/unit/kube/).
#pragma once

#include <compare>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "common/status.h"
#include "kube/client.h"

namespace tj::kube {

struct ServerVersion {
  int major = 0, minor = 0, patch = 0;
  std::string text;  // as the server said it: "v1.37.2", "v1.31.0-gke.1"

  // Ordered by major, minor, patch; `text` does not take part.
  std::strong_ordering operator<=>(const ServerVersion& o) const {
    return std::tie(major, minor, patch) <=> std::tie(o.major, o.minor, o.patch);
  }
  bool operator==(const ServerVersion& o) const {
    return std::tie(major, minor, patch) == std::tie(o.major, o.minor, o.patch);
  }
  // "1.37"
  std::string Minor() const { return std::to_string(major) + "." + std::to_string(minor); }
};

// The oldest Kubernetes the operator starts on, and why (docs/deploy.md says the same): the
// CRD's validation rules (x-kubernetes-validations, CEL, GA in 1.29 with messageExpression,
// reason and fieldPath) refuse a bad TrainingJob and keep spec.managedBy immutable, and
// spec.managedBy follows batch/v1 Job's, which 1.30 introduced (and MultiKueue sets). Pods'
// DisruptionTarget condition (1.26+) is older than both.
inline constexpr int kMinimumMajor = 1;
inline constexpr int kMinimumMinor = 30;
ServerVersion MinimumServerVersion();

// "v1.37.2", "1.30", "v1.31.0-gke.1", "v1.29.3+k3s1": major.minor[.patch], an optional "v",
// anything after the numbers ignored. An error naming the text for anything else.
StatusOr<ServerVersion> ParseVersion(const std::string& text);

// The answer of GET /version: gitVersion, else major and minor (EKS and GKE have answered
// minor "31+"). An error naming what is missing or malformed.
StatusOr<ServerVersion> ParseVersionInfo(const nlohmann::json& info);

// OK when `server` is at least `minimum`; else an error that names both and what to do.
Status CheckServerVersion(const ServerVersion& server, const ServerVersion& minimum);

// GET /version through `client` (which retries transport errors and 5xx answers), parsed.
StatusOr<ServerVersion> ReadServerVersion(Client* client);

// Whether the server serves `r` (discovery: GET /apis/<group>/<version>, or /api/v1, lists it):
// a question every authenticated client may ask, which names no resource (so it reads no
// object and an audit log records no request of `r`). A 404 is false; an error only when the
// server does not answer.
StatusOr<bool> Serves(Client& client, const Resource& r);

}  // namespace tj::kube
