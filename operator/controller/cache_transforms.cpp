#include "operator/controller/cache_transforms.h"

#include <initializer_list>

namespace tj::controller {
namespace {

using nlohmann::json;

// Keeps only `keys` of the object `o` (no-op when `o` is not an object).
void KeepOnly(json& o, std::initializer_list<const char*> keys) {
  if (!o.is_object()) return;
  json kept = json::object();
  for (const char* k : keys) {
    if (auto it = o.find(k); it != o.end()) kept[k] = std::move(*it);
  }
  o = std::move(kept);
}

}  // namespace

void TrimPodForCache(json& pod) {
  if (!pod.is_object()) return;
  KeepOnly(pod, {"apiVersion", "kind", "metadata", "spec", "status"});
  if (auto md = pod.find("metadata"); md != pod.end()) {
    KeepOnly(*md, {"name", "namespace", "uid", "resourceVersion", "generation", "labels",
                   "ownerReferences", "creationTimestamp", "deletionTimestamp"});
  }
  if (auto spec = pod.find("spec"); spec != pod.end()) {
    KeepOnly(*spec, {"containers"});
    if (auto cs = spec->find("containers"); cs != spec->end() && cs->is_array()) {
      for (auto& c : *cs) KeepOnly(c, {"name", "args"});
    }
  }
  if (auto st = pod.find("status"); st != pod.end()) {
    // conditions: PodScheduled=False says why a pod is Pending (StartupDeadlineExceeded).
    KeepOnly(*st, {"phase", "reason", "message", "podIP", "conditions", "containerStatuses"});
  }
}

void KeepIdentity(json& object) {
  if (!object.is_object()) return;
  KeepOnly(object, {"apiVersion", "kind", "metadata"});
  if (auto md = object.find("metadata"); md != object.end()) {
    KeepOnly(*md, {"name", "namespace", "uid", "resourceVersion", "generation", "labels",
                   "ownerReferences", "deletionTimestamp"});
  }
}

bool OnlyVersionChanged(const json& old_obj, const json& new_obj) {
  static const json kNone;
  auto metadata = [](const json& o) -> const json& {
    if (!o.is_object()) return kNone;
    auto it = o.find("metadata");
    return it != o.end() && it->is_object() ? *it : kNone;
  };
  const json& ma = metadata(old_obj);
  const json& mb = metadata(new_obj);
  if (!ma.is_object() || !mb.is_object()) return false;
  if (ma.value("resourceVersion", json()) == mb.value("resourceVersion", json())) {
    return false;  // a resync: look again
  }
  // Compared without copies: the same top-level fields, equal but for the metadata, whose
  // fields are equal but for resourceVersion.
  if (old_obj.size() != new_obj.size() || ma.size() != mb.size()) return false;
  for (auto it = old_obj.begin(); it != old_obj.end(); ++it) {
    auto other = new_obj.find(it.key());
    if (other == new_obj.end()) return false;
    if (it.key() != "metadata" && *it != *other) return false;
  }
  for (auto it = ma.begin(); it != ma.end(); ++it) {
    if (it.key() == "resourceVersion") continue;
    auto other = mb.find(it.key());
    if (other == mb.end() || *it != *other) return false;
  }
  return true;
}

}  // namespace tj::controller
