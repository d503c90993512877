#include "kube/expectations.h"

#include "kube/object_meta.h"

namespace tj::kube {
namespace {

std::string Id(const Resource& r, const std::string& object_key) {
  return r.plural + ":" + object_key;
}

bool Met(bool create, bool new_version, const std::string& value,
         const std::shared_ptr<const nlohmann::json>& cached) {
  if (create) return cached != nullptr;
  if (!cached || !cached->is_object() || !cached->contains("metadata")) return true;
  const nlohmann::json& md = (*cached)["metadata"];
  if (!md.is_object()) return true;
  if (new_version) return md.value("resourceVersion", "") != value;
  if (IsBeingDeleted(*cached)) return true;
  return !value.empty() && md.value("uid", "") != value;
}

}  // namespace

Expectations::Expectations(Clock* clock, Clock::Duration ttl) : clock_(clock), ttl_(ttl) {}

void Expectations::Add(const std::string& key, const Resource& resource,
                       const std::string& object_key, Kind kind, const std::string& value) {
  MutexLock lock(mu_);
  by_key_[key][Id(resource, object_key)] = {resource, kind, value, clock_->Now() + ttl_};
}

void Expectations::ExpectCreate(const std::string& key, const Resource& resource,
                                const std::string& object_key) {
  Add(key, resource, object_key, Kind::kCreate, "");
}

void Expectations::ExpectDelete(const std::string& key, const Resource& resource,
                                const std::string& object_key, const std::string& uid) {
  Add(key, resource, object_key, Kind::kDelete, uid);
}

void Expectations::ExpectNewVersion(const std::string& key, const Resource& resource,
                                    const std::string& object_key, const std::string& old_version) {
  Add(key, resource, object_key, Kind::kNewVersion, old_version);
}

void Expectations::Forget(const std::string& key, const Resource& resource,
                          const std::string& object_key) {
  MutexLock lock(mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  it->second.erase(Id(resource, object_key));
  if (it->second.empty()) by_key_.erase(it);
}

void Expectations::Clear(const std::string& key) {
  MutexLock lock(mu_);
  by_key_.erase(key);
}

std::optional<Clock::Duration> Expectations::Pending(const std::string& key, const Lookup& lookup) {
  MutexLock lock(mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  const auto now = clock_->Now();
  std::optional<Clock::Duration> first;
  for (auto e = it->second.begin(); e != it->second.end();) {
    const std::string object_key = e->first.substr(e->first.find(':') + 1);
    if (now >= e->second.expires ||
        Met(e->second.kind == Kind::kCreate, e->second.kind == Kind::kNewVersion, e->second.value,
            lookup(e->second.resource, object_key))) {
      e = it->second.erase(e);
      continue;
    }
    const auto left = e->second.expires - now;
    if (!first || left < *first) first = left;
    ++e;
  }
  if (it->second.empty()) by_key_.erase(it);
  return first;
}

size_t Expectations::size() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [key, m] : by_key_) n += m.size();
  return n;
}

}  // namespace tj::kube
