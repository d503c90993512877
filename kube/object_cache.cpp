#include "kube/object_cache.h"

#include "kube/resource.h"

namespace tj::kube {
namespace {

using json = nlohmann::json;

const json& Metadata(const json& o) {
  static const json kEmpty = json::object();
  return o.is_object() && o.contains("metadata") && o["metadata"].is_object() ? o["metadata"]
                                                                              : kEmpty;
}

std::string ResourceVersionOf(const json& o) { return Metadata(o).value("resourceVersion", ""); }

}  // namespace

ObjectCache::ObjectCache() {
  index_funcs_[kNamespaceIndex] = [](const json& o) {
    return std::vector<std::string>{Metadata(o).value("namespace", "")};
  };
  index_funcs_[kOwnerIndex] = [](const json& o) {
    std::vector<std::string> v;
    const json& md = Metadata(o);
    if (md.contains("ownerReferences") && md["ownerReferences"].is_array()) {
      for (const auto& ref : md["ownerReferences"]) {
        if (ref.is_object() && ref.contains("uid")) v.push_back(ref.value("uid", ""));
      }
    }
    return v;
  };
  index_funcs_[kLabelIndex] = [](const json& o) {
    std::vector<std::string> v;
    const json& md = Metadata(o);
    if (md.contains("labels") && md["labels"].is_object()) {
      for (const auto& [k, val] : md["labels"].items()) {
        if (val.is_string()) v.push_back(k + "=" + val.get<std::string>());
      }
    }
    return v;
  };
}

void ObjectCache::AddIndex(const std::string& name, IndexFunc func) {
  MutexLock lock(mu_);
  index_funcs_[name] = std::move(func);
  for (const auto& [key, o] : objects_) {
    for (const auto& v : index_funcs_[name](*o)) indexes_[name][v].insert(key);
  }
}

void ObjectCache::IndexLocked(const std::string& key, const json& object) {
  for (const auto& [name, func] : index_funcs_) {
    for (const auto& v : func(object)) indexes_[name][v].insert(key);
  }
}

void ObjectCache::UnindexLocked(const std::string& key, const json& object) {
  for (const auto& [name, func] : index_funcs_) {
    auto& idx = indexes_[name];
    for (const auto& v : func(object)) {
      auto it = idx.find(v);
      if (it == idx.end()) continue;
      it->second.erase(key);
      if (it->second.empty()) idx.erase(it);
    }
  }
}

ObjectCache::Ptr ObjectCache::Upsert(json object, Ptr* stored) {
  std::string key = ObjectKey(object);
  auto fresh = std::make_shared<const json>(std::move(object));
  if (stored != nullptr) *stored = fresh;
  MutexLock lock(mu_);
  Ptr old;
  if (auto it = objects_.find(key); it != objects_.end()) {
    old = std::move(it->second);
    UnindexLocked(key, *old);
  }
  IndexLocked(key, *fresh);
  objects_[key] = std::move(fresh);
  return old;
}

ObjectCache::Ptr ObjectCache::Remove(const std::string& key) {
  MutexLock lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return nullptr;
  Ptr old = std::move(it->second);
  objects_.erase(it);
  UnindexLocked(key, *old);
  return old;
}

ObjectCache::Delta ObjectCache::Replace(std::vector<json> objects) {
  Delta d;
  std::map<std::string, Ptr> fresh;
  for (auto& o : objects) {
    std::string key = ObjectKey(o);
    fresh[std::move(key)] = std::make_shared<const json>(std::move(o));
  }
  objects.clear();
  MutexLock lock(mu_);
  for (const auto& [key, old] : objects_) {
    auto it = fresh.find(key);
    if (it == fresh.end()) {
      d.deleted.push_back(old);
    } else if (ResourceVersionOf(*old) != ResourceVersionOf(*it->second)) {
      d.updated.emplace_back(old, it->second);
    }
  }
  for (const auto& [key, o] : fresh) {
    if (!objects_.count(key)) d.added.push_back(o);
  }
  objects_ = std::move(fresh);
  indexes_.clear();
  for (const auto& [key, o] : objects_) IndexLocked(key, *o);
  return d;
}

std::optional<json> ObjectCache::Get(const std::string& key) const {
  Ptr o = GetShared(key);
  if (!o) return std::nullopt;
  return *o;
}

ObjectCache::Ptr ObjectCache::GetShared(const std::string& key) const {
  MutexLock lock(mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : it->second;
}

std::vector<json> ObjectCache::List() const {
  std::vector<json> v;
  for (const auto& o : ListShared()) v.push_back(*o);
  return v;
}

std::vector<ObjectCache::Ptr> ObjectCache::ListShared() const {
  MutexLock lock(mu_);
  std::vector<Ptr> v;
  v.reserve(objects_.size());
  for (const auto& [key, o] : objects_) v.push_back(o);
  return v;
}

std::vector<std::string> ObjectCache::Keys() const {
  MutexLock lock(mu_);
  std::vector<std::string> v;
  for (const auto& [key, o] : objects_) v.push_back(key);
  return v;
}

std::vector<json> ObjectCache::ByIndex(const std::string& index, const std::string& value) const {
  MutexLock lock(mu_);
  std::vector<json> v;
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return v;
  auto keys = idx->second.find(value);
  if (keys == idx->second.end()) return v;
  for (const auto& k : keys->second) v.push_back(*objects_.at(k));
  return v;
}

size_t ObjectCache::CountByIndex(const std::string& index, const std::string& value) const {
  MutexLock lock(mu_);
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return 0;
  auto keys = idx->second.find(value);
  return keys == idx->second.end() ? 0 : keys->second.size();
}

std::vector<std::string> ObjectCache::KeysByIndex(const std::string& index,
                                                  const std::string& value, size_t at_most) const {
  MutexLock lock(mu_);
  std::vector<std::string> v;
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return v;
  auto keys = idx->second.find(value);
  if (keys == idx->second.end()) return v;
  for (const auto& k : keys->second) {
    if (v.size() >= at_most) break;
    v.push_back(k);
  }
  return v;
}

size_t ObjectCache::size() const {
  MutexLock lock(mu_);
  return objects_.size();
}

}  // namespace tj::kube
