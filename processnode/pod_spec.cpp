#include "processnode/pod_spec.h"

#include <map>

namespace tj::processnode {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "registry:5000/org/tj-trainer:v1@sha256:..." -> "tj-trainer".
std::string ImageBaseName(std::string image) {
  if (auto at = image.find('@'); at != std::string::npos) image.resize(at);
  auto slash = image.rfind('/');
  std::string last = slash == std::string::npos ? image : image.substr(slash + 1);
  if (auto colon = last.find(':'); colon != std::string::npos) last.resize(colon);
  return last;
}

// Expands $(VAR) with earlier variables; $$(VAR) is a literal $(VAR).
std::string Expand(const std::string& s, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '(') {
      auto close = s.find(')', i + 2);
      if (close != std::string::npos) {
        std::string name = s.substr(i + 2, close - i - 2);
        if (auto it = vars.find(name); it != vars.end()) {
          out += it->second;
          i = close;
          continue;
        }
      }
    }
    out += s[i];
  }
  return out;
}

StatusOr<std::string> FieldRef(const json& pod, const std::string& path, const std::string& pod_ip,
                               const std::string& node_name) {
  const json md = pod.value("metadata", json::object());
  if (path == "metadata.name") return md.value("name", "");
  if (path == "metadata.namespace") return md.value("namespace", "");
  if (path == "metadata.uid") return md.value("uid", "");
  if (path == "spec.nodeName") return node_name;
  if (path == "spec.serviceAccountName") {
    return pod.value("spec", json::object()).value("serviceAccountName", "default");
  }
  if (path == "status.podIP" || path == "status.hostIP") {
    return path == "status.podIP" ? pod_ip : std::string("127.0.0.1");
  }
  for (const char* prefix : {"metadata.labels['", "metadata.annotations['"}) {
    std::string p(prefix);
    if (path.rfind(p, 0) == 0 && EndsWith(path, "']")) {
      std::string key = path.substr(p.size(), path.size() - p.size() - 2);
      const char* field = p.find("labels") != std::string::npos ? "labels" : "annotations";
      const json m = md.value(field, json::object());
      return m.value(key, "");
    }
  }
  return Status::Error("fieldRef " + path + " is not supported by the process node");
}

}  // namespace

std::vector<std::string> ExpandArgs(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env) {
  std::map<std::string, std::string> vars;
  for (const auto& e : env) {
    auto eq = e.find('=');
    if (eq != std::string::npos) vars[e.substr(0, eq)] = e.substr(eq + 1);
  }
  std::vector<std::string> out;
  out.reserve(argv.size());
  for (const auto& a : argv) out.push_back(Expand(a, vars));
  return out;
}

StatusOr<std::string> PodFieldValue(const json& pod, const std::string& field_path,
                                    const std::string& pod_ip, const std::string& node_name) {
  return FieldRef(pod, field_path, pod_ip, node_name);
}

std::optional<std::string> ExecutableForImage(const std::string& image,
                                              const std::string& bin_dir) {
  std::string base = ImageBaseName(image);
  // The CPU-only trainer image (Dockerfile target trainer-cpu) holds the same program.
  if (EndsWith(base, "tj-trainer-cpu")) return bin_dir + "/tj-trainer";
  for (const char* own : {"tj-trainer", "tj-operator", "tj-process-node"}) {
    if (EndsWith(base, own)) return bin_dir + "/" + own;
  }
  for (const char* shell : {"busybox", "debian", "ubuntu", "alpine", "bash"}) {
    if (base == shell) return std::string("/bin/sh");
  }
  return std::nullopt;
}

StatusOr<std::vector<std::string>> ContainerArgv(const json& container,
                                                 const std::string& bin_dir) {
  std::vector<std::string> argv;
  const std::string name = container.value("name", "");
  if (container.contains("command") && container["command"].is_array() &&
      !container["command"].empty()) {
    for (const auto& c : container["command"]) argv.push_back(c.get<std::string>());
  } else {
    std::string image = container.value("image", "");
    auto exe = ExecutableForImage(image, bin_dir);
    if (!exe) {
      return Status::Error("container " + name + ": image \"" + image +
                           "\" has no local executable and the container has no command; the "
                           "process node runs images named *tj-trainer or *tj-operator, or a "
                           "command");
    }
    argv.push_back(*exe);
  }
  if (container.contains("args") && container["args"].is_array()) {
    for (const auto& a : container["args"]) argv.push_back(a.get<std::string>());
  }
  return argv;
}

StatusOr<std::vector<std::string>> ContainerEnv(const json& pod, const json& container,
                                                const std::string& pod_ip,
                                                const std::string& node_name,
                                                const KeyLookup& lookup) {
  std::vector<std::string> out;
  std::map<std::string, std::string> vars;
  const std::string cname = container.value("name", "");
  if (!container.contains("env") || !container["env"].is_array()) return out;
  for (const auto& e : container["env"]) {
    std::string name = e.value("name", "");
    std::string value;
    if (e.contains("value")) {
      value = Expand(e.value("value", ""), vars);
    } else if (e.contains("valueFrom")) {
      const json& vf = e["valueFrom"];
      StatusOr<std::string> v = Status::Error("unsupported valueFrom");
      bool optional = false;
      if (vf.contains("fieldRef")) {
        v = FieldRef(pod, vf["fieldRef"].value("fieldPath", ""), pod_ip, node_name);
      } else if (vf.contains("secretKeyRef")) {
        optional = vf["secretKeyRef"].value("optional", false);
        v = lookup("Secret", vf["secretKeyRef"].value("name", ""),
                   vf["secretKeyRef"].value("key", ""));
      } else if (vf.contains("configMapKeyRef")) {
        optional = vf["configMapKeyRef"].value("optional", false);
        v = lookup("ConfigMap", vf["configMapKeyRef"].value("name", ""),
                   vf["configMapKeyRef"].value("key", ""));
      }
      if (!v.ok()) {
        if (optional) continue;
        return v.status().WithContext("container " + cname + ", env " + name);
      }
      value = *v;
    }
    vars[name] = value;
    out.push_back(name + "=" + value);
  }
  return out;
}

std::string LoopbackAddress(int n, int network) {
  int x = 1 + (n / 253) % 254;
  int y = 2 + n % 253;
  return "127." + std::to_string(network) + "." + std::to_string(x) + "." + std::to_string(y);
}

std::string HostsFile(const std::string& own_ip, const std::string& own_hostname,
                      const std::vector<HostEntry>& peers) {
  std::string s =
      "# written by tj-process-node\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n";
  s += own_ip + "\t" + own_hostname + "\n";
  for (const auto& p : peers) {
    if (p.hostname.empty() || p.subdomain.empty()) continue;
    std::string fqdn = p.hostname + "." + p.subdomain + "." + p.ns + ".svc";
    s += p.ip + "\t" + fqdn + " " + fqdn + ".cluster.local";
    if (p.ip != own_ip) s += " " + p.hostname;
    s += "\n";
  }
  return s;
}

std::string PodPhase(const std::vector<ContainerState>& containers,
                     const std::string& restart_policy) {
  using P = ContainerState::Phase;
  int running = 0, waiting = 0, succeeded = 0, failed = 0;
  for (const auto& c : containers) {
    if (c.phase == P::kRunning) {
      ++running;
    } else if (c.phase == P::kWaiting) {
      // A container waiting to be restarted after it ran counts as running (kubelet).
      if (c.restart_count > 0)
        ++running;
      else
        ++waiting;
    } else if (c.exit_code == 0 && c.signal == 0) {
      ++succeeded;
    } else {
      ++failed;
    }
  }
  if (waiting > 0) return "Pending";
  if (running > 0) return "Running";
  if (containers.empty()) return "Pending";
  // All terminated.
  if (restart_policy == "Always") return "Running";  // about to restart
  if (failed > 0) return restart_policy == "OnFailure" ? "Running" : "Failed";
  return "Succeeded";
}

json PodStatus(const json& pod, const std::vector<ContainerState>& containers,
               const std::string& pod_ip, const std::string& host_ip, const std::string& start_time,
               const std::string& now) {
  using P = ContainerState::Phase;
  const std::string policy = pod.value("spec", json::object()).value("restartPolicy", "Always");
  std::string phase = PodPhase(containers, policy);
  bool all_running = !containers.empty();
  json statuses = json::array();
  for (const auto& c : containers) {
    json st = {{"name", c.name},
               {"restartCount", c.restart_count},
               {"ready", c.phase == P::kRunning && c.probe_ready},
               {"started", c.phase == P::kRunning && c.started},
               {"image", ""},
               {"imageID", ""}};
    for (const auto& spec_c : pod["spec"].value("containers", json::array())) {
      if (spec_c.value("name", "") == c.name) st["image"] = spec_c.value("image", "");
    }
    if (c.phase == P::kRunning) {
      st["state"] = {{"running", {{"startedAt", c.started_at}}}};
    } else if (c.phase == P::kWaiting) {
      st["state"] = {{"waiting", {{"reason", c.reason.empty() ? "ContainerCreating" : c.reason}}}};
      if (!c.message.empty()) st["state"]["waiting"]["message"] = c.message;
    } else {
      json term = {{"exitCode", c.exit_code},
                   {"reason", c.reason},
                   {"startedAt", c.started_at},
                   {"finishedAt", c.finished_at}};
      if (c.signal != 0) term["signal"] = c.signal;
      if (!c.message.empty()) term["message"] = c.message;
      st["state"] = {{"terminated", term}};
    }
    if (!c.last_terminated.is_null()) st["lastState"] = {{"terminated", c.last_terminated}};
    if (c.phase != P::kRunning || !c.probe_ready) all_running = false;
    statuses.push_back(st);
  }
  auto cond = [&](const char* type, bool ok, const std::string& reason = "") {
    json c = {{"type", type}, {"status", ok ? "True" : "False"}, {"lastTransitionTime", now}};
    if (!reason.empty() && !ok) c["reason"] = reason;
    return c;
  };
  bool done = phase == "Succeeded" || phase == "Failed";
  std::string not_ready = done ? "PodCompleted" : "ContainersNotReady";
  json status = {
      {"phase", phase},
      {"hostIP", host_ip},
      {"startTime", start_time},
      {"conditions",
       json::array({cond("Initialized", true), cond("Ready", all_running, not_ready),
                    cond("ContainersReady", all_running, not_ready), cond("PodScheduled", true)})},
      {"containerStatuses", statuses}};
  if (!pod_ip.empty()) {
    status["podIP"] = pod_ip;
    status["podIPs"] = json::array({{{"ip", pod_ip}}});
  }
  return status;
}

}  // namespace tj::processnode
