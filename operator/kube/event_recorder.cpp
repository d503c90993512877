#include "operator/kube/event_recorder.h"

#include <cstdio>

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

Status EventRecorder::Record(const json& object, const std::string& type, const std::string& reason,
                             const std::string& message) {
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
  const std::string now = FormatTime(wall_clock_());

  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = seen_.find(key); it != seen_.end()) {
    Seen s = it->second;
    lock.unlock();
    json patch = {{"count", s.count + 1}, {"lastTimestamp", now}};
    auto r = client_->Patch(resources::kEvents, s.ns, s.name, PatchType::kMerge, patch);
    if (r.ok()) {
      std::lock_guard<std::mutex> relock(mu_);
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
  std::lock_guard<std::mutex> relock(mu_);
  seen_[key] = Seen{ns, (*r)["metadata"].value("name", ""), 1};
  return Status::Ok();
}

}  // namespace tj::kube
