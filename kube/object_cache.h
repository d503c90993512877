// A thread-safe in-memory copy of objects of one resource, keyed "namespace/name", with
// indexes: by namespace, by owner (ownerReferences[].uid) and by label ("key=value"), plus any
// added before use. What an informer fills and a controller reads instead of the API server.
// Each object is held once, immutable, behind a shared pointer: an object goes in by move, and
// readers that only look (the *Shared calls) share it instead of copying it, so a large
// object (a TrainingJob near the API server's size limit) is not copied per reader or event.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"

namespace tj::kube {

class ObjectCache {
 public:
  using json = nlohmann::json;
  using Ptr = std::shared_ptr<const json>;
  // Index values of one object (an object may have several, or none).
  using IndexFunc = std::function<std::vector<std::string>(const json&)>;

  static constexpr const char* kNamespaceIndex = "namespace";
  static constexpr const char* kOwnerIndex = "owner";  // owner uid
  static constexpr const char* kLabelIndex = "label";  // "key=value"

  ObjectCache();

  // Adds an index; call before the first object goes in.
  void AddIndex(const std::string& name, IndexFunc func);

  // Inserts or replaces `object` (moved in); returns the previous object (null when there was
  // none) and sets `*stored` (when given) to the object as cached.
  Ptr Upsert(json object, Ptr* stored = nullptr);
  // Removes by key; returns the removed object (null when there was none).
  Ptr Remove(const std::string& key);

  // What Replace() changed, to tell event handlers.
  struct Delta {
    std::vector<Ptr> added;
    std::vector<std::pair<Ptr, Ptr>> updated;  // (old, new) with a different resourceVersion
    std::vector<Ptr> deleted;
  };
  // Makes the content exactly `objects` (a relist, moved in) and reports the difference.
  Delta Replace(std::vector<json> objects);

  // Copies, for readers that change what they read (or read little).
  std::optional<json> Get(const std::string& key) const;
  std::vector<json> List() const;
  // Objects whose index `index` has `value`; empty for an unknown index.
  std::vector<json> ByIndex(const std::string& index, const std::string& value) const;
  // How many objects index `index` has under `value`, and the keys of the first `at_most` of
  // them (in key order): for readers that count without copying (0 / none for an unknown
  // index).
  size_t CountByIndex(const std::string& index, const std::string& value) const;
  std::vector<std::string> KeysByIndex(const std::string& index, const std::string& value,
                                       size_t at_most) const;
  // The cached objects themselves (null / empty when absent): no copy.
  Ptr GetShared(const std::string& key) const;
  std::vector<Ptr> ListShared() const;
  std::vector<std::string> Keys() const;
  size_t size() const;

 private:
  void IndexLocked(const std::string& key, const json& object) TJ_REQUIRES(mu_);
  void UnindexLocked(const std::string& key, const json& object) TJ_REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, IndexFunc> index_funcs_;
  std::map<std::string, Ptr> objects_ TJ_GUARDED_BY(mu_);
  // index name -> value -> keys
  std::map<std::string, std::map<std::string, std::set<std::string>>> indexes_ TJ_GUARDED_BY(mu_);
};

}  // namespace tj::kube
