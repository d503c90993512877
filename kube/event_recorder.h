// Records core/v1 Events about objects, as `kubectl describe` shows them. An event repeated
// (same object, type, reason and message) is not written again: the existing Event's count
// and lastTimestamp are patched, as client-go's correlator does. RecordAsync() hands the
// Event to a background thread (client-go's broadcaster), so a reconcile never waits for it;
// with DeferWhile() that thread also gives way to the controller's own writes while it is
// busy. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "kube/client.h"
#include "kube/time_format.h"

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

  // Record() on a background thread, in order; returns at once. At most kMaxQueuedEvents wait:
  // more are dropped (and reported). Failures go to `on_error` when set (before the first
  // call). Events still queued when the recorder is destroyed are dropped.
  static constexpr size_t kMaxQueuedEvents = 1000;
  void RecordAsync(const nlohmann::json& object, const std::string& type, const std::string& reason,
                   const std::string& message);
  void set_on_error(std::function<void(const Status&)> on_error) {
    on_error_ = std::move(on_error);
  }
  // Events are information, the objects a controller creates are its work: while `busy()`
  // says the controller has work in hand, a queued Event waits, at most `max_delay` after it
  // was recorded (its timestamps stay the time it was recorded). A burst of work (a few
  // hundred jobs submitted at once) then gets the API server to itself, and its Events follow.
  // Set before the first RecordAsync().
  void DeferWhile(std::function<bool()> busy, std::chrono::milliseconds max_delay) {
    busy_ = std::move(busy);
    max_delay_ = max_delay;
  }
  // Blocks until every queued Event was written (or failed), at most `timeout`; for tests.
  bool Flush(std::chrono::milliseconds timeout);

  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

 private:
  struct Pending {
    nlohmann::json object;
    std::string type, reason, message;
    WallTime at;                                // when it was recorded
    std::chrono::steady_clock::time_point due;  // send by then even while busy
  };
  void SendLoop(const std::stop_token& stop);
  Status RecordAt(const nlohmann::json& object, const std::string& type, const std::string& reason,
                  const std::string& message, WallTime at);

  struct Seen {
    std::string ns, name;  // of the Event object
    int count = 0;
  };

  Client* client_;
  std::string component_, host_;
  std::function<WallTime()> wall_clock_;
  Mutex mu_;
  std::map<std::string, Seen> seen_ TJ_GUARDED_BY(mu_);  // correlation key -> Event
  uint64_t sequence_ TJ_GUARDED_BY(mu_) = 0;

  std::function<void(const Status&)> on_error_;
  std::function<bool()> busy_;
  std::chrono::milliseconds max_delay_{0};
  Mutex queue_mu_;
  std::condition_variable_any queue_cv_;
  std::deque<Pending> queue_ TJ_GUARDED_BY(queue_mu_);
  bool sending_ TJ_GUARDED_BY(queue_mu_) = false;
  uint64_t dropped_ TJ_GUARDED_BY(queue_mu_) = 0;
  std::jthread sender_;  // started by the first RecordAsync()
};

}  // namespace tj::kube
