// Records core/v1 Events about objects, as `kubectl describe` shows them. An event repeated
// (same object, type, reason and message) is not written again: the existing Event's count
// and lastTimestamp are patched, as client-go's correlator does. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "operator/kube/client.h"
#include "operator/kube/time_format.h"

namespace tj::kube {

class EventRecorder {
 public:
  // `component` is the source (e.g. "tj-operator"); `client` must outlive the recorder.
  EventRecorder(
      Client* client, std::string component, std::string host = "",
      std::function<WallTime()> wall_clock = [] { return std::chrono::system_clock::now(); });

  // `object` is the involved object as read from the API server (apiVersion, kind, metadata).
  // `type` is "Normal" or "Warning"; `reason` UpperCamelCase; `message` for humans.
  Status Record(const nlohmann::json& object, const std::string& type, const std::string& reason,
                const std::string& message);

 private:
  struct Seen {
    std::string ns, name;  // of the Event object
    int count = 0;
  };

  Client* client_;
  std::string component_, host_;
  std::function<WallTime()> wall_clock_;
  std::mutex mu_;
  std::map<std::string, Seen> seen_;  // correlation key -> Event. GUARDED_BY(mu_)
  uint64_t sequence_ = 0;             // GUARDED_BY(mu_)
};

}  // namespace tj::kube
