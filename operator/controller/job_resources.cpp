#include "operator/controller/job_resources.h"

#include <algorithm>
#include <string>

#include "common/sha256.h"
#include "kube/object_meta.h"

namespace tj::controller {
namespace {

using nlohmann::json;

json Labels(const std::string& job) { return {{api::kLabelJobName, job}}; }

// Sets `var` in the container's env, in place (a template's env may be long: no copy of it).
void SetEnv(json& container, json var) {
  json& env = container["env"];
  if (!env.is_array()) env = json::array();
  const json& name = var["name"];
  for (auto it = env.begin(); it != env.end();) {
    if (it->is_object() && it->contains("name") && (*it)["name"] == name) {
      it = env.erase(it);
    } else {
      ++it;
    }
  }
  env.push_back(std::move(var));
}

// The headless Service's ports: spec.port, and each replica type's own `tfjob-port`.
json ServicePorts(const api::TrainingJobSpec& spec) {
  json ports = json::array({{{"name", "tj-port"}, {"port", spec.port}, {"targetPort", spec.port}}});
  for (const auto& [t, rs] : spec.replica_specs) {
    const int port = ReplicaPort(spec, t);
    bool known = false;
    for (const json& p : ports) known = known || p["port"] == port;
    if (known) continue;
    ports.push_back(
        {{"name", "tj-port-" + std::to_string(port)}, {"port", port}, {"targetPort", port}});
  }
  return ports;
}

// The value of the container's env var `name` when it is set literally ("" otherwise).
std::string LiteralEnv(const json& container, const std::string& name) {
  if (!container.contains("env") || !container["env"].is_array()) return "";
  for (const json& e : container["env"]) {
    if (kube::TextOf(e, "name") == name && e.contains("value") && e["value"].is_string()) {
      return e["value"];
    }
  }
  return "";
}

bool HasEnv(const json& container, const std::string& name) {
  if (!container.contains("env") || !container["env"].is_array()) return false;
  for (const json& e : container["env"]) {
    if (kube::TextOf(e, "name") == name) return true;
  }
  return false;
}

std::optional<int> ParsePort(const std::string& value) {
  if (value.empty() || value.size() > 5) return std::nullopt;
  int port = 0;
  for (char ch : value) {
    if (ch < '0' || ch > '9') return std::nullopt;
    port = port * 10 + (ch - '0');
  }
  if (port <= 0 || port > 65535) return std::nullopt;
  return port;
}

}  // namespace

std::string StatusPortArg(const json& container) {
  if (!container.contains("args") || !container["args"].is_array()) return "";
  const json& args = container["args"];
  std::string value;
  for (size_t k = 0; k < args.size(); ++k) {
    if (!args[k].is_string()) continue;
    const std::string a = args[k];
    if (a == "--status-port" && k + 1 < args.size() && args[k + 1].is_string()) {
      value = args[k + 1];
    } else if (a.rfind("--status-port=", 0) == 0) {
      value = a.substr(14);
    }
  }
  return value;
}

std::string PodName(const std::string& job, api::ReplicaType type, int index) {
  return job + "-" + api::TaskName(type) + "-" + std::to_string(index);
}

std::string SecretName(const api::ObjectRef& job) {
  std::string name = job.name + "-rendezvous";
  // A UID's first 8 letters and digits (the API server's are lower-case hex and dashes; only
  // what a DNS subdomain allows is taken from any other).
  std::string uid;
  for (char c : job.uid) {
    if (uid.size() == 8) break;
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')) uid += c;
  }
  if (!uid.empty()) name += "-" + uid;
  return name;
}

json OwnerReference(const json& job) {
  const api::ObjectRef r = api::RefOf(job);
  return {{"apiVersion", api::kApiVersion},
          {"kind", api::kKind},
          {"name", r.name},
          {"uid", r.uid},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

bool IsOwnedBy(const json& object, const json& job) {
  const api::ObjectRef r = api::RefOf(job);
  if (!object.is_object() || !object.contains("metadata")) return false;
  const json& m = object["metadata"];
  if (!m.is_object() || !m.contains("ownerReferences") || !m["ownerReferences"].is_array()) {
    return false;
  }
  for (const auto& o : m["ownerReferences"]) {
    if (!o.is_object() || o.value("kind", "") != api::kKind) continue;
    if (o.value("name", "") != r.name) continue;
    if (!r.uid.empty() && o.value("uid", "") != r.uid) continue;
    return true;
  }
  return false;
}

int ReplicaPort(const api::TrainingJobSpec& spec, api::ReplicaType type) {
  const auto it = spec.replica_specs.find(type);
  if (it == spec.replica_specs.end()) return spec.port;
  const json& tmpl = it->second.pod_template;
  if (!tmpl.is_object() || !tmpl.contains("spec")) return spec.port;
  const int ci = TrainerContainerIndex(tmpl["spec"]);
  if (ci < 0) return spec.port;
  const json& c = tmpl["spec"]["containers"][ci];
  if (!c.contains("ports") || !c["ports"].is_array()) return spec.port;
  for (const json& p : c["ports"]) {
    if (!p.is_object() || p.value("name", "") != kTfJobPortName) continue;
    const auto cp = p.find("containerPort");
    if (cp != p.end() && cp->is_number_integer() && *cp >= 1 && *cp <= 65535) {
      return cp->get<int>();
    }
  }
  return spec.port;
}

json TfConfig(const api::ObjectRef& job, const api::TrainingJobSpec& spec, api::ReplicaType type,
              int index) {
  json cluster = json::object();
  for (const auto& [t, rs] : spec.replica_specs) {
    if (rs.replicas <= 0) continue;
    const std::string port = std::to_string(ReplicaPort(spec, t));
    json hosts = json::array();
    for (int i = 0; i < rs.replicas; ++i) {
      hosts.push_back(PodName(job.name, t, i) + "." + job.name + "." + job.ns + ".svc:" + port);
    }
    cluster[api::TaskName(t)] = hosts;
  }
  return {{"cluster", cluster},
          {"task", {{"type", api::TaskName(type)}, {"index", index}}},
          {"environment", "cloud"}};
}

json BuildService(const json& job, const api::TrainingJobSpec& spec) {
  const api::ObjectRef r = api::RefOf(job);
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata",
           {{"name", r.name},
            {"namespace", r.ns},
            {"labels", Labels(r.name)},
            {"ownerReferences", json::array({OwnerReference(job)})}}},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},
            {"selector", Labels(r.name)},
            {"ports", ServicePorts(spec)}}}};
}

std::string KeyHash(const std::string& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  const Digest d = Sha256Of(key.data(), key.size());
  std::string out = "sha256:";
  for (size_t i = 0; i < 8; ++i) {
    out += kHex[d[i] >> 4];
    out += kHex[d[i] & 15];
  }
  return out;
}

std::string KeyHashOf(const json& object) {
  const json& md = kube::MetadataOf(object);
  auto an = md.find("annotations");
  return an != md.end() ? kube::TextOf(*an, kKeyHashAnnotation) : "";
}

json BuildSecret(const json& job, const std::string& key) {
  const api::ObjectRef r = api::RefOf(job);
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata",
           {{"name", SecretName(r)},
            {"namespace", r.ns},
            {"labels", Labels(r.name)},
            {"annotations", {{kKeyHashAnnotation, KeyHash(key)}}},
            {"ownerReferences", json::array({OwnerReference(job)})}}},
          {"type", "Opaque"},
          {"stringData", {{kRendezvousKeyField, key}}}};
}

int TrainerContainerIndex(const json& pod_spec) {
  if (!pod_spec.is_object() || !pod_spec.contains("containers")) return -1;
  return TrainerIndexAmong(pod_spec["containers"]);
}

int TrainerIndexAmong(const json& containers) {
  if (!containers.is_array()) return -1;
  for (const char* name : {"tensorflow", "trainer"}) {
    for (size_t i = 0; i < containers.size(); ++i) {
      if (kube::TextOf(containers[i], "name") == name) {
        return static_cast<int>(i);
      }
    }
  }
  return containers.size() == 1 ? 0 : -1;
}

std::optional<int> StatusPortOf(const json& pod) {
  if (!pod.is_object() || !pod.contains("spec")) return std::nullopt;
  const int i = TrainerContainerIndex(pod["spec"]);
  if (i < 0) return std::nullopt;
  const json& c = pod["spec"]["containers"][i];
  // tj-trainer's --status-port overrides its TJ_STATUS_PORT, so the operator reads the same.
  const std::string arg = StatusPortArg(c);
  return ParsePort(arg.empty() ? LiteralEnv(c, kStatusPortEnv) : arg);
}

namespace {

bool AsksForEscalation(const json& container_security_context) {
  const json& csc = container_security_context;
  if (auto p = csc.find("privileged"); p != csc.end() && p->is_boolean() && p->get<bool>()) {
    return true;
  }
  auto caps = csc.find("capabilities");
  if (caps == csc.end() || !caps->is_object()) return false;
  auto add = caps->find("add");
  if (add == caps->end() || !add->is_array()) return false;
  return std::any_of(add->begin(), add->end(), [](const json& c) {
    return c.is_string() && (c == "SYS_ADMIN" || c == "CAP_SYS_ADMIN");
  });
}

}  // namespace

void ApplySecurityDefaults(json& pod_spec) {
  // A field set to null is unset for the API server (which then applies its own default, e.g.
  // the service account's token), so it is unset here too.
  auto set_default = [](json& obj, const char* key, const json& value) {
    if (!obj.contains(key) || obj[key].is_null()) obj[key] = value;
  };
  if (!pod_spec.contains("securityContext") || !pod_spec["securityContext"].is_object()) {
    pod_spec["securityContext"] = json::object();
  }
  json& psc = pod_spec["securityContext"];
  set_default(psc, "runAsNonRoot", true);
  set_default(psc, "seccompProfile", {{"type", "RuntimeDefault"}});
  set_default(psc, "fsGroup", kDefaultFsGroup);
  set_default(pod_spec, "automountServiceAccountToken", false);
  for (const char* list : {"initContainers", "containers"}) {
    if (!pod_spec.contains(list) || !pod_spec[list].is_array()) continue;
    for (json& c : pod_spec[list]) {
      if (!c.is_object()) continue;
      if (!c.contains("securityContext") || !c["securityContext"].is_object()) {
        c["securityContext"] = json::object();
      }
      json& csc = c["securityContext"];
      // The API server refuses allowPrivilegeEscalation false beside privileged or an added
      // CAP_SYS_ADMIN: such a container asked for escalation, so it gets no default here.
      if (!AsksForEscalation(csc)) set_default(csc, "allowPrivilegeEscalation", false);
      set_default(csc, "capabilities", {{"drop", json::array({"ALL"})}});
    }
  }
}

json InPlaceRestartRules(api::RestartPolicy policy) {
  json codes;
  switch (policy) {
    case api::RestartPolicy::kNever:
      return nullptr;
    case api::RestartPolicy::kExitCode:
      codes = {{"operator", "In"}, {"values", json::array({75})}};
      for (int code = 128; code <= 255; ++code) codes["values"].push_back(code);
      break;
    case api::RestartPolicy::kOnFailure:
    case api::RestartPolicy::kAlways:
      codes = {{"operator", "NotIn"}, {"values", json::array({0})}};
      break;
  }
  return {{"restartPolicy", "Never"},
          {"restartPolicyRules",
           json::array({{{"action", "RestartAllContainers"}, {"exitCodes", codes}}})}};
}

std::string CapacityProbeName(const std::string& job, int index) {
  return job + "-probe-" + std::to_string(index);
}

json BuildCapacityProbe(const json& job, const api::TrainingJobSpec& spec, int index) {
  json pod = BuildPod(job, spec, api::ReplicaType::kWorker, index, 0);
  json& meta = pod["metadata"];
  meta["name"] = CapacityProbeName(api::RefOf(job).name, index);
  json& labels = meta["labels"];
  for (const char* key :
       {api::kLabelReplicaType, api::kLabelReplicaIndex, api::kLabelRestartCount}) {
    labels.erase(key);
  }
  labels[api::kLabelCapacityProbe] = std::to_string(index);
  if (meta.contains("annotations") && meta["annotations"].is_object()) {
    meta["annotations"].erase(kStatusPortAnnotation);
  }
  json& spec_json = pod["spec"];
  for (const char* key : {"hostname", "subdomain", "initContainers"}) spec_json.erase(key);
  spec_json["terminationGracePeriodSeconds"] = 0;
  for (json& c : spec_json["containers"]) {
    for (const char* key : {"args", "env", "envFrom", "livenessProbe", "readinessProbe",
                            "startupProbe", "lifecycle", "restartPolicy", "restartPolicyRules"}) {
      c.erase(key);
    }
    c["command"] = json::array({"sleep", "infinity"});
  }
  return pod;
}

json BuildPod(const json& job, const api::TrainingJobSpec& spec, api::ReplicaType type, int index,
              int gang, const std::string& key_hash, bool restart_in_place) {
  const api::ObjectRef r = api::RefOf(job);
  const api::ReplicaSpec& rs = spec.replica_specs.at(type);
  const json& tmpl = rs.pod_template;
  const std::string name = PodName(r.name, type, index);

  // One copy of the template's metadata and spec, changed in place (a template may be large).
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}};
  json& meta = pod["metadata"];
  if (auto it = tmpl.find("metadata"); it != tmpl.end() && it->is_object()) meta = *it;
  if (!meta.is_object()) meta = json::object();
  json& labels = meta["labels"];
  if (!labels.is_object()) labels = json::object();
  labels[api::kLabelJobName] = r.name;
  labels[api::kLabelReplicaType] = api::TaskName(type);
  labels[api::kLabelReplicaIndex] = std::to_string(index);
  labels[api::kLabelRestartCount] = std::to_string(gang);
  if (restart_in_place) labels[kLabelRestartInPlace] = "true";
  if (!key_hash.empty()) {
    json& annotations = meta["annotations"];
    if (!annotations.is_object()) annotations = json::object();
    annotations[kKeyHashAnnotation] = key_hash;
  }
  meta["name"] = name;
  meta["namespace"] = r.ns;
  meta.erase("generateName");
  meta["ownerReferences"] = json::array({OwnerReference(job)});

  json& pod_spec = pod["spec"];
  if (auto it = tmpl.find("spec"); it != tmpl.end()) pod_spec = *it;
  if (!pod_spec.is_object()) pod_spec = json::object();
  ApplySecurityDefaults(pod_spec);
  // The operator restarts replicas itself (the whole gang, with backoff); the node must not.
  pod_spec["restartPolicy"] = "Never";
  pod_spec["hostname"] = name;
  pod_spec["subdomain"] = r.name;
  const int ci = TrainerContainerIndex(pod_spec);
  if (ci >= 0) {
    json& c = pod_spec["containers"][ci];
    SetEnv(c, {{"name", "TF_CONFIG"}, {"value", TfConfig(r, spec, type, index).dump()}});
    SetEnv(c, {{"name", "TJ_JOB_NAME"}, {"value", r.name}});
    SetEnv(c, {{"name", "TJ_RESTART_COUNT"}, {"value", std::to_string(gang)}});
    // An elastic job's global batch: the same shards at every size (docs/elastic.md).
    if (spec.elastic) {
      SetEnv(c, {{"name", "TJ_ELASTIC_SHARDS"}, {"value", std::to_string(spec.elastic->shards)}});
    }
    if (restart_in_place && !c.contains("restartPolicy") && !c.contains("restartPolicyRules")) {
      const json rules = InPlaceRestartRules(rs.restart_policy);
      if (rules.is_object()) c.update(rules);
    }
    SetEnv(c, {{"name", "TJ_JOB_UID"}, {"value", r.uid}});  // scopes the job's backups
    SetEnv(c, {{"name", "TJ_RENDEZVOUS_KEY"},
               {"valueFrom",
                {{"secretKeyRef", {{"name", SecretName(r)}, {"key", kRendezvousKeyField}}}}}});
    // Only the environment carries what the operator adds: a program's command and args reach
    // it as written (a strict argument parser must not meet a flag it does not know).
    if (!HasEnv(c, kStatusPortEnv) && StatusPortArg(c).empty()) {
      // One port per replica (its place in TF_CONFIG's cluster): a real cluster gives every
      // pod its own network namespace, the process node's pods share the host's.
      int ordinal = index;
      if (type != api::ReplicaType::kChief) ordinal += spec.Replicas(api::ReplicaType::kChief);
      // The evaluator outlives the gangs of an elastic job: after the largest one.
      if (type == api::ReplicaType::kEvaluator) {
        ordinal +=
            spec.elastic ? spec.elastic->max_replicas : spec.Replicas(api::ReplicaType::kWorker);
      }
      SetEnv(c,
             {{"name", kStatusPortEnv}, {"value", std::to_string(kDefaultStatusPort + ordinal)}});
    }
  }
  if (const auto port = StatusPortOf(pod)) {
    json& annotations = pod["metadata"]["annotations"];
    if (!annotations.is_object()) annotations = json::object();
    annotations[kStatusPortAnnotation] = std::to_string(*port);
  }
  return pod;
}

}  // namespace tj::controller
