#include "kube/event_recorder.h"

#include <cstdio>
#include <utility>

namespace tj::kube {

using nlohmann::json;

namespace {
constexpr size_t kMaxRemembered = 4096;
}

EventRecorder::EventRecorder(Client* client, std::string component, std::string host,
                             std::function<WallTime()> wall_clock)
    : client_(client),
      component_(std::move(component)),
      host_(std::move(host)),
      wall_clock_(std::move(wall_clock)) {}

EventRecorder::~EventRecorder() {
  if (sender_.joinable()) {
    sender_.request_stop();
    sender_.join();
  }
}

void EventRecorder::RecordAsync(const json& object, const std::string& type,
                                const std::string& reason, const std::string& message) {
  // What Record() reads of the object: no need to keep its spec and status.
  json ref = {{"apiVersion", object.value("apiVersion", "")}, {"kind", object.value("kind", "")}};
  const json md = object.value("metadata", json::object());
  for (const char* k : {"name", "namespace", "uid", "resourceVersion"}) {
    if (md.contains(k)) ref["metadata"][k] = md[k];
  }
  std::string overflow;
  {
    MutexLock lock(queue_mu_);
    if (queue_.size() >= kMaxQueuedEvents) {
      ++dropped_;
      overflow = "dropped event " + reason + " for " +
                 ObjectKey(md.value("namespace", ""), md.value("name", "")) + ": " +
                 std::to_string(kMaxQueuedEvents) + " events are waiting for the API server (" +
                 std::to_string(dropped_) + " dropped so far)";
    } else {
      queue_.push_back({std::move(ref), type, reason, message, wall_clock_(),
                        std::chrono::steady_clock::now() + max_delay_});
      if (!sender_.joinable()) {
        sender_ = std::jthread([this](const std::stop_token& stop) { SendLoop(stop); });
      }
    }
  }
  queue_cv_.notify_all();
  if (!overflow.empty() && on_error_) on_error_(Status::Error(overflow));
}

void EventRecorder::SendLoop(const std::stop_token& stop) {
  while (true) {
    Pending p;
    {
      MutexLock lock(queue_mu_);
      sending_ = false;
      queue_cv_.notify_all();
      if (!queue_cv_.wait(lock, stop, [this] {
            queue_mu_.AssertHeld();
            return !queue_.empty();
          }))
        return;
      p = std::move(queue_.front());
      queue_.pop_front();
      sending_ = true;
      while (busy_ && std::chrono::steady_clock::now() < p.due && busy_()) {
        queue_cv_.wait_for(lock, stop, std::chrono::milliseconds(20), [] { return false; });
        if (stop.stop_requested()) return;
      }
    }
    Status s = RecordAt(p.object, p.type, p.reason, p.message, p.at);
    if (!s.ok() && on_error_) on_error_(s);
  }
}

bool EventRecorder::Flush(std::chrono::milliseconds timeout) {
  MutexLock lock(queue_mu_);
  return queue_cv_.wait_for(lock, timeout, [this] {
    queue_mu_.AssertHeld();
    return queue_.empty() && !sending_;
  });
}

Status EventRecorder::Record(const json& object, const std::string& type, const std::string& reason,
                             const std::string& message) {
  return RecordAt(object, type, reason, message, wall_clock_());
}

Status EventRecorder::RecordAt(const json& object, const std::string& type,
                               const std::string& reason, const std::string& message, WallTime at) {
  const json md = object.value("metadata", json::object());
  const std::string obj_ns = md.value("namespace", "");
  const std::string obj_name = md.value("name", "");
  const std::string kind = object.value("kind", "");
  const std::string ns = obj_ns.empty() ? "default" : obj_ns;
  const std::string what =
      "recording event " + reason + " for " + kind + " " + ObjectKey(obj_ns, obj_name);
  if (obj_name.empty()) return Status::Error(what + ": the object has no metadata.name");
  const std::string key = ns + "\x1f" + kind + "\x1f" + obj_name + "\x1f" + md.value("uid", "") +
                          "\x1f" + type + "\x1f" + reason + "\x1f" + message;
  const std::string now = FormatTime(at);

  MutexLock lock(mu_);
  if (auto it = seen_.find(key); it != seen_.end()) {
    Seen s = it->second;
    lock.unlock();
    json patch = {{"count", s.count + 1}, {"lastTimestamp", now}};
    auto r = client_->Patch(resources::kEvents, s.ns, s.name, PatchType::kMerge, patch);
    if (r.ok()) {
      MutexLock relock(mu_);
      seen_[key].count = s.count + 1;
      return Status::Ok();
    }
    if (!IsNotFound(r.error())) return r.error().ToStatus().WithContext(what);
    lock.lock();
    seen_.erase(key);  // the Event expired on the server (1 h TTL): start a new one
  }
  if (seen_.size() >= kMaxRemembered) seen_.clear();
  char suffix[32];
  auto nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(wall_clock_().time_since_epoch())
          .count();
  std::snprintf(suffix, sizeof(suffix), ".%llx",
                static_cast<unsigned long long>(nanos) + sequence_++);
  lock.unlock();

  json ev = {{"apiVersion", "v1"},
             {"kind", "Event"},
             {"metadata", {{"name", obj_name + suffix}, {"namespace", ns}}},
             {"involvedObject",
              {{"apiVersion", object.value("apiVersion", "")},
               {"kind", kind},
               {"name", obj_name},
               {"namespace", obj_ns},
               {"uid", md.value("uid", "")},
               {"resourceVersion", md.value("resourceVersion", "")}}},
             {"type", type},
             {"reason", reason},
             {"message", message},
             {"source", {{"component", component_}}},
             {"firstTimestamp", now},
             {"lastTimestamp", now},
             {"count", 1},
             {"reportingComponent", component_},
             {"reportingInstance", host_}};
  if (!host_.empty()) ev["source"]["host"] = host_;
  auto r = client_->Create(resources::kEvents, ns, ev);
  if (!r.ok()) return r.error().ToStatus().WithContext(what);
  MutexLock relock(mu_);
  seen_[key] = Seen{ns, (*r)["metadata"].value("name", ""), 1};
  return Status::Ok();
}

}  // namespace tj::kube
