#include "operator/controller/cache_transforms.h"

#include <algorithm>
#include <initializer_list>
#include <string>

#include "kube/object_meta.h"
#include "operator/api/training_job.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/node_view.h"

namespace tj::controller {
namespace {

using nlohmann::json;

constexpr char kOurLabelPrefix[] = "tjo.dev/";

// Keeps only `keys` of the object `o` (no-op when `o` is not an object).
void KeepOnly(json& o, std::initializer_list<const char*> keys) {
  if (!o.is_object()) return;
  json kept = json::object();
  for (const char* k : keys) {
    if (auto it = o.find(k); it != o.end()) kept[k] = std::move(*it);
  }
  o = std::move(kept);
}

// Of metadata.annotations only the rendezvous key's hash stays (the reconciler compares it).
void KeepKeyHashAnnotation(json& metadata, json annotations) {
  const std::string hash = KeyHashOf({{"metadata", {{"annotations", std::move(annotations)}}}});
  if (!hash.empty()) metadata["annotations"] = {{kKeyHashAnnotation, hash}};
}

// Of the labels only the operator's own (tjo.dev/...): the job's name, replica type and
// index, gang. A template's own labels are copied into every pod it makes.
void KeepOurLabels(json& metadata) {
  auto labels = metadata.find("labels");
  if (labels == metadata.end()) return;
  if (!labels->is_object()) {
    metadata.erase(labels);
    return;
  }
  for (auto it = labels->begin(); it != labels->end();) {
    if (it.key().rfind(kOurLabelPrefix, 0) == 0) {
      ++it;
    } else {
      it = labels->erase(it);
    }
  }
}

json TakeAnnotations(json& metadata) {
  auto it = metadata.find("annotations");
  return it != metadata.end() ? std::move(*it) : json();
}

// Of status.conditions only those a PodView reads (pod_view.cpp): PodScheduled=False, which says
// why a pod is Pending (StartupDeadlineExceeded), and DisruptionTarget=True, which says why it
// goes; each with its type, status, reason and message. A running pod keeps none: its four
// conditions with their times were about a third of what the cache held per pod.
void KeepTellingConditions(json& status) {
  auto conds = status.find("conditions");
  if (conds == status.end()) return;
  json kept = json::array();
  if (conds->is_array()) {
    for (auto& c : *conds) {
      if (!c.is_object()) continue;
      const std::string type = kube::TextOf(c, "type"), st = kube::TextOf(c, "status");
      if ((type == "PodScheduled" && st == "False") ||
          (type == "DisruptionTarget" && st == "True")) {
        KeepOnly(c, {"type", "status", "reason", "message"});
        kept.push_back(std::move(c));
      }
    }
  }
  if (kept.empty()) {
    status.erase(conds);
  } else {
    *conds = std::move(kept);
  }
}

// Of a container's state what a PodView reads: why it waits, how it ended, how often it was
// restarted in place. A running container's start time is never read.
void KeepEndingState(json& container_status) {
  KeepOnly(container_status, {"name", "state", "restartCount"});
  auto state = container_status.find("state");
  if (state == container_status.end()) return;
  KeepOnly(*state, {"waiting", "terminated"});
  if (auto w = state->find("waiting"); w != state->end()) KeepOnly(*w, {"reason", "message"});
  if (auto t = state->find("terminated"); t != state->end()) {
    KeepOnly(*t, {"exitCode", "reason", "finishedAt", "message"});
  }
}

}  // namespace

void TrimPodForCache(json& pod) {
  if (!pod.is_object()) return;
  KeepOnly(pod, {"apiVersion", "kind", "metadata", "spec", "status"});
  if (auto md = pod.find("metadata"); md != pod.end() && md->is_object()) {
    json annotations = TakeAnnotations(*md);
    KeepOnly(*md, {"name", "namespace", "uid", "resourceVersion", "generation", "labels",
                   "ownerReferences", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds"});
    KeepKeyHashAnnotation(*md, std::move(annotations));
    KeepOurLabels(*md);
    if (auto refs = md->find("ownerReferences"); refs != md->end() && refs->is_array()) {
      for (auto& ref : *refs) KeepOnly(ref, {"apiVersion", "kind", "name", "uid", "controller"});
    }
  }
  if (auto spec = pod.find("spec"); spec != pod.end()) {
    KeepOnly(*spec, {"containers", "nodeName", "tolerations"});
    if (auto cs = spec->find("containers"); cs != spec->end() && cs->is_array()) {
      for (auto& c : *cs) {
        if (c.is_object()) c = ContainerAsCached(c);
      }
    }
  }
  if (auto st = pod.find("status"); st != pod.end()) {
    KeepOnly(*st, {"phase", "reason", "podIP", "conditions", "containerStatuses"});
    KeepTellingConditions(*st);
    if (auto cs = st->find("containerStatuses"); cs != st->end() && cs->is_array()) {
      for (auto& c : *cs) KeepEndingState(c);
    }
  }
}

const json* TrainingJobControllerRef(const json& object) {
  const json& md = kube::MetadataOf(object);
  auto refs = md.find("ownerReferences");
  if (refs == md.end() || !refs->is_array()) return nullptr;
  for (const auto& ref : *refs) {
    if (!ref.is_object()) continue;
    auto controller = ref.find("controller");
    if (controller == ref.end() || *controller != true) continue;
    if (kube::TextOf(ref, "kind") != api::kKind) continue;
    if (kube::TextOf(ref, "apiVersion").rfind(std::string(api::kGroup) + "/", 0) == 0) return &ref;
  }
  return nullptr;
}

bool OwnedByATrainingJob(const json& object) { return TrainingJobControllerRef(object) != nullptr; }

json ContainerAsCached(const json& container) {
  if (!container.is_object()) return container;
  json out = json::object();
  if (auto name = container.find("name"); name != container.end()) out["name"] = *name;
  // Of the args only --status-port (StatusPortOf reads it): a template's args may be long, and
  // every pod would keep them.
  if (const std::string port = StatusPortArg(container); !port.empty()) {
    out["args"] = json::array({"--status-port=" + port});
  }
  // Of the env only the status port: TF_CONFIG and the rest are not read again.
  if (auto env = container.find("env"); env != container.end() && env->is_array()) {
    for (const auto& e : *env) {
      if (kube::TextOf(e, "name") == kStatusPortEnv) out["env"].push_back(e);
    }
  }
  return out;
}

json TemplateForView(const json& pod_template) {
  const json& md = kube::MetadataOf(pod_template);
  json meta = json::object();
  for (const char* k : {"creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"}) {
    if (auto it = md.find(k); it != md.end()) meta[k] = *it;
  }
  if (auto labels = md.find("labels"); labels != md.end() && labels->is_object()) {
    for (auto it = labels->begin(); it != labels->end(); ++it) {
      if (it.key().rfind(kOurLabelPrefix, 0) == 0) meta["labels"][it.key()] = it.value();
    }
  }
  const std::string hash = KeyHashOf(pod_template);
  if (!hash.empty()) meta["annotations"] = {{kKeyHashAnnotation, hash}};
  json spec_out = {{"containers", json::array()}};
  if (pod_template.is_object()) {
    auto spec = pod_template.find("spec");
    if (spec != pod_template.end() && spec->is_object()) {
      auto cs = spec->find("containers");
      if (cs != spec->end() && cs->is_array()) {
        for (const auto& c : *cs) spec_out["containers"].push_back(ContainerAsCached(c));
      }
      for (const char* k : {"nodeName", "tolerations"}) {
        if (auto it = spec->find(k); it != spec->end()) spec_out[k] = *it;
      }
    }
  }
  return {{"metadata", std::move(meta)}, {"spec", std::move(spec_out)}};
}

void TrimNodeForCache(json& node) {
  if (!node.is_object()) return;
  KeepOnly(node, {"apiVersion", "kind", "metadata", "spec", "status"});
  if (auto md = node.find("metadata"); md != node.end()) {
    KeepOnly(*md, {"name", "uid", "resourceVersion"});
  }
  if (auto spec = node.find("spec"); spec != node.end()) {
    KeepOnly(*spec, {"taints", "unschedulable"});
  }
  if (auto st = node.find("status"); st != node.end()) {
    KeepOnly(*st, {"conditions", "declaredFeatures"});
    // Of the features its kubelet declares, only the one the operator reads (node_view.h): the
    // list grows with each Kubernetes release, and one that comes or goes is no reason for a
    // pass.
    if (auto features = st->find("declaredFeatures"); features != st->end()) {
      if (features->is_array() && std::find(features->begin(), features->end(),
                                            kRestartAllContainersFeature) != features->end()) {
        *features = json::array({kRestartAllContainersFeature});
      } else {
        st->erase(features);
      }
    }
    auto conds = st->find("conditions");
    if (conds == st->end()) return;
    json ready = json::array();
    if (conds->is_array()) {
      for (auto& c : *conds) {
        if (kube::TextOf(c, "type") != "Ready") continue;
        // Not lastHeartbeatTime: a heartbeat that changes nothing else is no reason for a pass.
        KeepOnly(c, {"type", "status", "reason", "lastTransitionTime"});
        ready.push_back(std::move(c));
        break;
      }
    }
    *conds = std::move(ready);
  }
}

namespace {

// spec.replicaSpecs of `job` when it is an object; null otherwise.
json* ReplicaSpecsOf(json& job) {
  if (!job.is_object()) return nullptr;
  auto spec = job.find("spec");
  if (spec == job.end() || !spec->is_object()) return nullptr;
  auto specs = spec->find("replicaSpecs");
  return specs != spec->end() && specs->is_object() ? &*specs : nullptr;
}

}  // namespace

void CompactTrainingJob(json& job) {
  if (auto md = job.find("metadata"); md != job.end() && md->is_object()) {
    md->erase("managedFields");  // server-side apply's bookkeeping, never read
  }
  json* specs = ReplicaSpecsOf(job);
  if (specs == nullptr) return;
  for (auto& [type, rs] : specs->items()) {
    if (!rs.is_object()) continue;
    auto tmpl = rs.find("template");
    if (tmpl == rs.end()) continue;
    std::string text = tmpl->dump(-1, ' ', false, json::error_handler_t::replace);
    text.shrink_to_fit();  // dump grows by doubling: up to twice the text otherwise
    rs.erase(tmpl);
    rs[kCompactTemplateKey] = std::move(text);
  }
}

json ExpandTrainingJob(const json& compact) {
  json job = compact;
  json* specs = ReplicaSpecsOf(job);
  if (specs == nullptr) return job;
  for (auto& [type, rs] : specs->items()) {
    if (!rs.is_object()) continue;
    auto text = rs.find(kCompactTemplateKey);
    if (text == rs.end()) continue;
    json tmpl = text->is_string() ? json::parse(text->get_ref<const std::string&>(), nullptr, false)
                                  : json();
    rs.erase(text);
    if (!tmpl.is_discarded()) rs["template"] = std::move(tmpl);
  }
  return job;
}

size_t CompactTemplateBytes(const json& compact) {
  size_t bytes = 0;
  if (!compact.is_object()) return 0;
  auto spec = compact.find("spec");
  if (spec == compact.end() || !spec->is_object()) return 0;
  auto specs = spec->find("replicaSpecs");
  if (specs == spec->end() || !specs->is_object()) return 0;
  for (const auto& rs : *specs) {
    if (!rs.is_object()) continue;
    auto text = rs.find(kCompactTemplateKey);
    if (text != rs.end() && text->is_string()) bytes += text->get_ref<const std::string&>().size();
  }
  return bytes;
}

void KeepIdentity(json& object) {
  if (!object.is_object()) return;
  KeepOnly(object, {"apiVersion", "kind", "metadata"});
  if (auto md = object.find("metadata"); md != object.end() && md->is_object()) {
    json annotations = TakeAnnotations(*md);
    KeepOnly(*md, {"name", "namespace", "uid", "resourceVersion", "generation", "labels",
                   "ownerReferences", "deletionTimestamp"});
    KeepKeyHashAnnotation(*md, std::move(annotations));
  }
}

namespace {

// Equal but for metadata.resourceVersion (which must differ: a resync is a change) and, with
// `ignore_conditions`, status.conditions. Compared without copies.
bool EqualButForVersion(const json& old_obj, const json& new_obj, bool ignore_conditions) {
  static const json kNone;
  auto field = [](const json& o, const char* name) -> const json& {
    if (!o.is_object()) return kNone;
    auto it = o.find(name);
    return it != o.end() && it->is_object() ? *it : kNone;
  };
  const json& ma = field(old_obj, "metadata");
  const json& mb = field(new_obj, "metadata");
  if (!ma.is_object() || !mb.is_object()) return false;
  if (ma.value("resourceVersion", json()) == mb.value("resourceVersion", json())) {
    return false;  // a resync: look again
  }
  // The same fields, equal, but for the one named (which may be on one side only).
  auto equal_but = [](const json& a, const json& b, const char* skip) {
    if (a.size() - a.count(skip) != b.size() - b.count(skip)) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (it.key() == skip) continue;
      auto other = b.find(it.key());
      if (other == b.end() || *it != *other) return false;
    }
    return true;
  };
  if (old_obj.size() != new_obj.size()) return false;
  for (auto it = old_obj.begin(); it != old_obj.end(); ++it) {
    auto other = new_obj.find(it.key());
    if (other == new_obj.end()) return false;
    if (it.key() == "metadata") continue;
    if (ignore_conditions && it.key() == "status" && it->is_object() && other->is_object()) {
      if (!equal_but(*it, *other, "conditions")) return false;
      continue;
    }
    if (*it != *other) return false;
  }
  return equal_but(ma, mb, "resourceVersion");
}

}  // namespace

bool OnlyVersionChanged(const json& old_obj, const json& new_obj) {
  return EqualButForVersion(old_obj, new_obj, /*ignore_conditions=*/false);
}

bool OnlyVersionOrConditionsChanged(const json& old_pod, const json& new_pod) {
  return EqualButForVersion(old_pod, new_pod, /*ignore_conditions=*/true);
}

}  // namespace tj::controller
