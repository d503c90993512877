// Expectations: the creates and deletes a controller has just sent to the API server that its
// informer caches do not show yet (client-go's ControllerExpectations). A key with pending
// expectations must not be reconciled from the caches: the pass would create again what it
// has just created, or count a pod it has just deleted as alive. Checked against the cache's
// state, not counted from events, so an event that arrived before the expectation was
// recorded cannot wedge a key; each expectation expires after a TTL anyway (a cache may miss a
// change across a relist), after which the reconciler acts on what it sees. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "kube/resource.h"

namespace tj::kube {

class Expectations {
 public:
  // The cached object of `resource` with key "namespace/name", or null when not cached
  // (ObjectCache::GetShared: looked at, not copied).
  using Lookup = std::function<std::shared_ptr<const nlohmann::json>(
      const Resource& resource, const std::string& object_key)>;

  // `clock` must outlive this object.
  Expectations(Clock* clock, Clock::Duration ttl);

  // Call before sending the create/delete, so the change cannot be seen before it is expected.
  void ExpectCreate(const std::string& key, const Resource& resource,
                    const std::string& object_key);
  // Satisfied once the object is gone from the cache, is being deleted, or has another uid
  // than `uid` (empty: any object counts as the one deleted).
  void ExpectDelete(const std::string& key, const Resource& resource, const std::string& object_key,
                    const std::string& uid);
  // After an update of an object whose cached version was `old_version`: satisfied once the
  // cache holds another version (a cache only moves forward, and the update's precondition
  // made it the next version after `old_version`) or no object.
  void ExpectNewVersion(const std::string& key, const Resource& resource,
                        const std::string& object_key, const std::string& old_version);
  // The request failed: expect nothing of it.
  void Forget(const std::string& key, const Resource& resource, const std::string& object_key);
  // Forgets everything about `key` (its object is gone).
  void Clear(const std::string& key);

  // Drops the expectations of `key` that `lookup` shows met or that expired; returns how long
  // until the first remaining one expires, or nullopt when none remains (the key may be
  // reconciled from the caches).
  std::optional<Clock::Duration> Pending(const std::string& key, const Lookup& lookup);

  size_t size() const;  // pending expectations of all keys

 private:
  enum class Kind { kCreate, kDelete, kNewVersion };
  struct Expected {
    Resource resource;
    Kind kind = Kind::kCreate;
    std::string value;  // kDelete: the uid deleted; kNewVersion: the version updated
    Clock::TimePoint expires;
  };
  void Add(const std::string& key, const Resource& resource, const std::string& object_key,
           Kind kind, const std::string& value);
  using ObjectId = std::string;  // "<plural>:<namespace>/<name>"

  Clock* clock_;
  Clock::Duration ttl_;
  mutable Mutex mu_;
  std::map<std::string, std::map<ObjectId, Expected>> by_key_ TJ_GUARDED_BY(mu_);
};

}  // namespace tj::kube
