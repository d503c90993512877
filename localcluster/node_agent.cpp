#include "localcluster/node_agent.h"

#include <cpprest/http_listener.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "localcluster/probe.h"
#include "localcluster/process.h"
#include "localcluster/service_account.h"
#include "operator/kube/backoff.h"
#include "operator/kube/config.h"
#include "operator/kube/time_format.h"

namespace tj::localnode {

namespace fs = std::filesystem;
using nlohmann::json;
namespace res = kube::resources;

namespace {

std::string Now() { return kube::FormatTime(std::chrono::system_clock::now()); }

// The longest a node shutdown (SIGTERM to the agent) waits for a pod's processes to end after
// their SIGTERM: less than the 10 s `hack/local-cluster.sh down` gives the agent itself.
constexpr int kShutdownGraceSeconds = 5;

std::string SafeName(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c == '/') c = '_';
  }
  return out;
}

int GpuCount() {
  int n = 0;
  for (int i = 0; i < 64; ++i) {
    if (fs::exists("/dev/nvidia" + std::to_string(i))) ++n;
  }
  return n;
}

// Writes a volume file as the kubelet's atomic writer does: a temporary file renamed over the
// old one, so a reader never sees half a token. Volumes are bind-mounted as directories, so
// the pod sees the new file.
Status WriteVolumeFile(const std::string& path, const std::string& content) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << content;
    if (!out.good()) return Status::Error("writing " + tmp + ": check the node's state directory");
  }
  fs::rename(tmp, path, ec);
  if (ec) return Status::Error("renaming " + tmp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

void WriteFileInPlace(const std::string& path, const std::string& content) {
  // Truncate and write the same inode: a bind mount of it sees the new content.
  std::ofstream out(path, std::ios::trunc);
  out << content;
}

}  // namespace

// Runs the containers of one pod and reports their states. One thread per pod. Each
// container runs under a supervisor (process.h) and the worker keeps <pod dir>/state.json
// (pid, start time, restarts): a worker created with that state after a restart of the
// agent adopts the processes that still run instead of starting them again.
class PodWorker {
 public:
  // `adopted`: the pod's state.json from before a restart of the agent, or null.
  PodWorker(NodeAgent* agent, const json& pod, std::string ip, json adopted = nullptr)
      : agent_(agent), pod_(pod), ip_(std::move(ip)), adopted_(std::move(adopted)) {
    const json md = pod.value("metadata", json::object());
    ns_ = md.value("namespace", "");
    name_ = md.value("name", "");
    uid_ = md.value("uid", "");
    hostname_ = pod["spec"].value("hostname", name_);
    subdomain_ = pod["spec"].value("subdomain", "");
    dir_ = agent_->options_.state_dir + "/pods/" + uid_;
    hosts_file_ = dir_ + "/etc-hosts";
    start_time_ = adopted_.is_object() ? adopted_.value("startTime", Now()) : Now();
  }
  ~PodWorker() {
    if (thread_.joinable()) {
      RequestDelete(0);
      thread_.join();
    }
  }

  void Start() {
    thread_ = std::jthread([this](const std::stop_token&) { Run(); });
  }

  // The pod has a deletionTimestamp (or is gone): stop its containers within `grace_s`.
  void RequestDelete(int grace_s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (delete_requested_) return;
    delete_requested_ = true;
    grace_s_ = grace_s;
    cv_.notify_all();
  }
  void MarkGone() {
    std::lock_guard<std::mutex> lock(mu_);
    gone_ = true;
  }
  // The agent stops (node shutdown): stop the containers, within the pod's grace period
  // but at most `max_grace_s`, and keep state.json, so that the next agent reports how they
  // ended and applies the restart policy.
  void StopForAgentShutdown(int max_grace_s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      gone_ = true;
      keep_state_ = true;
    }
    RequestDelete(std::min(max_grace_s, pod_["spec"].value("terminationGracePeriodSeconds", 30)));
  }

  const std::string& ns() const { return ns_; }
  HostEntry Entry() const { return {ip_, hostname_, subdomain_, ns_}; }
  const std::string& hosts_file() const { return hosts_file_; }
  std::string hostname() const { return hostname_; }
  const std::string& ip() const { return ip_; }
  std::string LogFile(const std::string& container) const {
    return agent_->options_.log_dir + "/pods/" + ns_ + "_" + name_ + "_" + container + ".log";
  }

 private:
  struct Container {
    json spec;
    ContainerState state;
    ProcessSpec process;
    pid_t pid = 0;                       // the supervisor's, also the process group's
    unsigned long long start_ticks = 0;  // ProcessStartTime(pid): guards against pid reuse
    bool config_ok = false;
    bool done = false;
    Clock::TimePoint restart_at{};
    kube::ExponentialBackoff backoff{std::chrono::seconds(1), std::chrono::seconds(30)};
    // The probes of the current run (reset at each start).
    std::optional<ProbeTracker> startup, liveness, readiness;
  };

  void Warn(const std::string& m) { agent_->log_->Warn("pod " + ns_ + "/" + name_ + ": " + m); }

  // Reads a key of a Secret or ConfigMap for env and volumes.
  StatusOr<std::string> Lookup(const std::string& kind, const std::string& name,
                               const std::string& key) {
    const auto& r = kind == "Secret" ? res::kSecrets : res::kConfigMaps;
    auto obj = agent_->client_->Get(r, ns_, name);
    if (!obj.ok()) return obj.error().ToStatus();
    const json data = obj->value("data", json::object());
    if (!data.contains(key)) return Status::Error(kind + " " + name + " has no key " + key);
    std::string v = data[key].get<std::string>();
    if (kind == "Secret") {
      auto d = kube::Base64Decode(v);
      if (!d) return Status::Error(kind + " " + name + " key " + key + " is not base64");
      v = *d;
    }
    return v;
  }

  // Prepares a volume's directory; returns it.
  StatusOr<std::string> PrepareVolume(const json& v) {
    const std::string name = v.value("name", "");
    std::error_code ec;
    if (v.contains("hostPath")) {
      std::string p = v["hostPath"].value("path", "");
      fs::create_directories(p, ec);
      return p;
    }
    if (v.contains("persistentVolumeClaim")) {
      std::string p = agent_->options_.state_dir + "/pvc/" + ns_ + "/" +
                      v["persistentVolumeClaim"].value("claimName", "");
      fs::create_directories(p, ec);
      return p;
    }
    std::string dir = dir_ + "/volumes/" + name;
    fs::create_directories(dir, ec);
    if (v.contains("projected")) {
      for (const auto& source : v["projected"].value("sources", json::array())) {
        Status s = WriteProjection(dir, source);
        if (!s.ok()) return s.WithContext("projected volume " + name);
      }
      return dir;
    }
    for (const char* kind : {"secret", "configMap"}) {
      if (!v.contains(kind)) continue;
      std::string obj_name =
          v[kind].value(std::string(kind) == "secret" ? "secretName" : "name", "");
      const auto& r = std::string(kind) == "secret" ? res::kSecrets : res::kConfigMaps;
      auto obj = agent_->client_->Get(r, ns_, obj_name);
      if (!obj.ok()) {
        if (v[kind].value("optional", false)) return dir;
        return obj.error().ToStatus().WithContext("volume " + name);
      }
      for (const auto& [k, val] : obj->value("data", json::object()).items()) {
        std::string content = val.get<std::string>();
        if (std::string(kind) == "secret") content = kube::Base64Decode(content).value_or("");
        std::ofstream(dir + "/" + k, std::ios::trunc) << content;
      }
    }
    return dir;
  }

  // Secret or ConfigMap data (decoded). The kube-root-ca.crt ConfigMap appears a moment after
  // its namespace (root-ca-cert-publisher): wait for it a little before giving up.
  StatusOr<json> ObjectData(const std::string& kind, const std::string& obj_name) {
    const auto& r = kind == "secret" ? res::kSecrets : res::kConfigMaps;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      auto obj = agent_->client_->Get(r, ns_, obj_name);
      if (obj.ok()) {
        json data = obj->value("data", json::object());
        if (kind == "secret") {
          for (auto& [k, val] : data.items()) {
            val = kube::Base64Decode(val.get<std::string>()).value_or("");
          }
        }
        return data;
      }
      if (!kube::IsNotFound(obj.error()) || obj_name != "kube-root-ca.crt" ||
          std::chrono::steady_clock::now() >= deadline) {
        return obj.error().ToStatus().WithContext(kind + " " + ns_ + "/" + obj_name);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // One source of a projected volume: secret, configMap, downwardAPI or serviceAccountToken.
  Status WriteProjection(const std::string& dir, const json& source) {
    for (const char* kind : {"secret", "configMap"}) {
      if (!source.contains(kind)) continue;
      const json& src = source[kind];
      auto data = ObjectData(kind, src.value("name", ""));
      if (!data.ok()) {
        if (src.value("optional", false)) return Status::Ok();
        return data.status();
      }
      if (src.contains("items")) {
        for (const auto& item : src["items"]) {
          const std::string key = item.value("key", "");
          if (!data->contains(key)) {
            if (src.value("optional", false)) continue;
            return Status::Error(std::string(kind) + " " + ns_ + "/" + src.value("name", "") +
                                 " has no key " + key);
          }
          TJ_RETURN_IF_ERROR(WriteVolumeFile(dir + "/" + item.value("path", key),
                                             (*data)[key].get<std::string>()));
        }
      } else {
        for (const auto& [k, val] : data->items()) {
          TJ_RETURN_IF_ERROR(WriteVolumeFile(dir + "/" + k, val.get<std::string>()));
        }
      }
    }
    if (source.contains("downwardAPI")) {
      for (const auto& item : source["downwardAPI"].value("items", json::array())) {
        if (!item.contains("fieldRef")) {
          return Status::Error("downwardAPI item " + item.value("path", "") +
                               ": only fieldRef is supported by the local node");
        }
        auto value = PodFieldValue(pod_, item["fieldRef"].value("fieldPath", ""), ip_,
                                   agent_->options_.node_name);
        if (!value.ok()) return value.status();
        TJ_RETURN_IF_ERROR(WriteVolumeFile(dir + "/" + item.value("path", ""), *value));
      }
    }
    if (source.contains("serviceAccountToken")) {
      TokenFile t{dir + "/" + source["serviceAccountToken"].value("path", "token"),
                  source["serviceAccountToken"],
                  {}};
      TJ_RETURN_IF_ERROR(RequestToken(&t));
      tokens_.push_back(std::move(t));
    }
    return Status::Ok();
  }

  // A projected service-account token: where it is written and when to renew it.
  struct TokenFile {
    std::string path;
    json projection;
    Clock::TimePoint refresh_at;
  };

  // Asks the API server for a token bound to this pod (TokenRequest) and writes it.
  Status RequestToken(TokenFile* t) {
    json body = TokenRequestBody(pod_, t->projection);
    const std::string path = TokenRequestPath(pod_);
    auto r = agent_->client_->Raw("POST", path, body);
    if (!r.ok()) {
      return r.error().ToStatus().WithContext(
          "requesting a service-account token (POST " + path +
          "); does the ServiceAccount exist, and does the API server have "
          "--service-account-signing-key-file?");
    }
    const std::string token = r->value("status", json::object()).value("token", "");
    if (token.empty()) return Status::Error("TokenRequest " + path + " returned no token");
    TJ_RETURN_IF_ERROR(WriteVolumeFile(t->path, token));
    const auto lifetime = std::chrono::seconds(body["spec"].value("expirationSeconds", 3600));
    t->refresh_at = agent_->clock_->Now() + TokenRefreshAfter(lifetime);
    return Status::Ok();
  }

  void RefreshTokens() {
    const auto now = agent_->clock_->Now();
    for (auto& t : tokens_) {
      if (now < t.refresh_at) continue;
      Status s = RequestToken(&t);
      if (!s.ok()) {
        Warn("renewing the service-account token " + t.path + ": " + s.message());
        t.refresh_at = now + std::chrono::seconds(10);
      }
    }
  }

  Status Prepare() {
    tokens_.clear();
    created_mount_points_.clear();
    std::error_code ec;
    fs::create_directories(dir_, ec);
    fs::create_directories(agent_->options_.log_dir + "/pods", ec);
    std::map<std::string, std::string> volume_dirs;
    for (const auto& v : pod_["spec"].value("volumes", json::array())) {
      auto d = PrepareVolume(v);
      if (!d.ok()) return d.status();
      volume_dirs[v.value("name", "")] = *d;
    }
    auto lookup = [this](const std::string& k, const std::string& n, const std::string& key) {
      return Lookup(k, n, key);
    };
    for (auto& c : containers_) {
      const std::string cname = c.spec.value("name", "");
      auto argv = ContainerArgv(c.spec, agent_->options_.bin_dir);
      if (!argv.ok()) return argv.status();
      auto env = ContainerEnv(pod_, c.spec, ip_, agent_->options_.node_name, lookup);
      if (!env.ok()) return env.status();
      c.process = ProcessSpec{};  // Prepare() may run again after a configuration error
      c.process.argv = *argv;
      // HOME is the pod's own directory, not the host user's: a container never sees the
      // host's ~/.kube/config (an in-cluster client would take it over its ServiceAccount).
      c.process.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                       "HOME=" + dir_, "HOSTNAME=" + hostname_, "TJ_POD_IP=" + ip_};
      for (const auto& e : *env) c.process.env.push_back(e);
      // What a kubelet adds for the `kubernetes` Service, here the API server's real address
      // (the Service's cluster IP is not routed on this machine). The pod's own env wins.
      auto defined = [&](const std::string& var) {
        return std::any_of(env->begin(), env->end(),
                           [&](const std::string& e) { return e.rfind(var + "=", 0) == 0; });
      };
      if (!agent_->options_.api_server.empty()) {
        auto service_env = KubernetesServiceEnv(agent_->options_.api_server);
        if (!service_env.ok()) return service_env.status();
        for (const auto& e : *service_env) {
          if (!defined(e.substr(0, e.find('=')))) c.process.env.push_back(e);
        }
      }
      if (!agent_->options_.mount_namespace && MountsServiceAccount(c.spec)) {
        // Nothing can be mounted at /var/run/secrets/kubernetes.io/serviceaccount without a
        // mount namespace: point in-cluster clients at the pod's copy instead.
        std::string sa_dir;
        for (const auto& m : c.spec.value("volumeMounts", json::array())) {
          if (MountsServiceAccount(json{{"volumeMounts", json::array({m})}})) {
            sa_dir = volume_dirs[m.value("name", "")];
          }
        }
        const std::string kubeconfig = dir_ + "/serviceaccount.kubeconfig";
        TJ_RETURN_IF_ERROR(WriteVolumeFile(
            kubeconfig, ServiceAccountKubeconfig(agent_->options_.api_server, sa_dir + "/ca.crt",
                                                 sa_dir + "/token", ns_)));
        c.process.env.push_back("TJ_SERVICE_ACCOUNT_DIR=" + sa_dir);
        if (!defined("KUBECONFIG")) c.process.env.push_back("KUBECONFIG=" + kubeconfig);
      }
      c.process.working_dir = c.spec.value("workingDir", "");
      if (c.process.working_dir.empty()) c.process.working_dir = dir_;
      c.process.log_file = LogFile(cname);
      c.process.exit_file = ExitFile(cname);
      fs::create_directories(fs::path(c.process.exit_file).parent_path(), ec);
      c.process.mount_namespace = agent_->options_.mount_namespace;
      c.process.hosts_file = hosts_file_;
      for (const auto& m : c.spec.value("volumeMounts", json::array())) {
        auto it = volume_dirs.find(m.value("name", ""));
        if (it == volume_dirs.end()) {
          return Status::Error("container " + cname + ": volumeMount " + m.value("name", "") +
                               " names no volume of the pod");
        }
        std::string src = it->second;
        if (m.contains("subPath")) {
          src += "/" + m.value("subPath", "");
          fs::create_directories(src, ec);
        }
        const std::string target = m.value("mountPath", "");
        // Mount points that do not exist are created on the host's file system in the
        // child; remember them (deepest first) to remove them, if empty, with the pod.
        // Not the service-account path: every pod mounts it, and removing a directory that
        // is a mount point in another pod's namespace would unmount it there.
        for (fs::path p = target; !p.empty() && p != p.root_path() && !fs::exists(p, ec);
             p = p.parent_path()) {
          if (std::string(kServiceAccountMountPath).rfind(p.string(), 0) == 0) break;
          created_mount_points_.push_back(p.string());
        }
        c.process.binds.emplace_back(src, target);
      }
      const bool only_service_account = c.process.binds.size() == 1 && MountsServiceAccount(c.spec);
      if (!c.process.binds.empty() && !c.process.mount_namespace) {
        if (!only_service_account)
          Warn("volume mounts need a mount namespace (run tj-local-node as root); container " +
               cname + " sees the volumes only through $TJ_VOLUME_<NAME>");
        for (const auto& m : c.spec.value("volumeMounts", json::array())) {
          std::string var = m.value("name", "");
          for (char& ch : var) ch = ch == '-' ? '_' : static_cast<char>(toupper(ch));
          c.process.env.push_back("TJ_VOLUME_" + var + "=" + volume_dirs[m.value("name", "")]);
        }
      }
      c.process.argv = ExpandArgs(c.process.argv, c.process.env);
      c.config_ok = true;
      // A fresh log per pod; restarts of the container, and adoption, append.
      if (!adopted_.is_object()) std::ofstream(c.process.log_file, std::ios::trunc);
    }
    return Status::Ok();
  }

  std::string ExitFile(const std::string& container) const {
    return dir_ + "/containers/" + container + ".exit";
  }
  std::string StateFile() const { return dir_ + "/state.json"; }

  // Records what a restarted agent needs to adopt the pod's processes.
  void SaveState() {
    json containers = json::array();
    for (const auto& c : containers_) {
      json e = {{"name", c.state.name},
                {"pid", c.pid},
                {"startTicks", c.start_ticks},
                {"startedAt", c.state.started_at},
                {"restartCount", c.state.restart_count},
                {"lastTerminated", c.state.last_terminated}};
      if (c.state.phase == ContainerState::Phase::kTerminated) {
        e["terminated"] = {{"exitCode", c.state.exit_code},
                           {"signal", c.state.signal},
                           {"reason", c.state.reason},
                           {"finishedAt", c.state.finished_at}};
      }
      containers.push_back(e);
    }
    json state = {{"uid", uid_}, {"namespace", ns_},         {"name", name_},
                  {"ip", ip_},   {"startTime", start_time_}, {"containers", containers}};
    Status s = WriteVolumeFile(StateFile(), state.dump());
    if (!s.ok()) Warn("saving the pod's state (a restarted agent cannot adopt it): " + s.message());
  }

  // Takes over a container from the state of the previous agent: still running (the same
  // pid and start time; the main loop notices when it ends, from its exit file), or ended
  // for good. false when there is nothing to adopt (the container is to be started).
  bool Adopt(Container& c) {
    for (const auto& e : adopted_.value("containers", json::array())) {
      if (e.value("name", "") != c.state.name) continue;
      c.state.restart_count = e.value("restartCount", 0);
      c.state.last_terminated = e.value("lastTerminated", json(nullptr));
      c.state.started_at = e.value("startedAt", "");
      if (e.contains("terminated")) {
        const json& t = e["terminated"];
        c.state.phase = ContainerState::Phase::kTerminated;
        c.state.exit_code = t.value("exitCode", 0);
        c.state.signal = t.value("signal", 0);
        c.state.reason = t.value("reason", "");
        c.state.finished_at = t.value("finishedAt", "");
        c.done = true;
        return true;
      }
      const pid_t pid = e.value("pid", 0);
      if (pid <= 0) return false;
      c.pid = pid;
      c.start_ticks = e.value("startTicks", 0ULL);
      c.state.phase = ContainerState::Phase::kRunning;
      StartProbes(c);
      agent_->log_->Emit({{"event", "container_adopted"},
                          {"pod", ns_ + "/" + name_},
                          {"container", c.state.name},
                          {"pid", pid}});
      return true;
    }
    return false;
  }

  // Non-blocking: whether the container's process ended, and how.
  bool Poll(const Container& c, ExitInfo* info) {
    bool lost = false;
    if (!PollSupervised(c.pid, c.start_ticks, ExitFile(c.state.name), info, &lost)) return false;
    if (lost) {
      Warn("container " + c.state.name + " (pid " + std::to_string(c.pid) +
           ") ended while no agent watched it and left no exit status; reported as exit code " +
           std::to_string(info->code));
    }
    return true;
  }

  void PostStatus() {
    SaveState();
    std::vector<ContainerState> states;
    for (const auto& c : containers_) states.push_back(c.state);
    json status = PodStatus(pod_, states, ip_, agent_->options_.host_ip, start_time_, Now());
    auto r = agent_->client_->Patch(res::kPods, ns_, name_, kube::PatchType::kMerge,
                                    {{"status", status}}, {"", false, "status"});
    // A status the API server did not take (it restarts, say) is sent again by the main
    // loop, or a pod that ended meanwhile would stay Running on the server for good.
    status_pending_ = !r.ok() && !kube::IsNotFound(r.error());
    if (status_pending_) {
      Warn("status update (retried in 1 s): " + r.error().ToString());
      status_retry_at_ = agent_->clock_->Now() + std::chrono::seconds(1);
    }
  }

  void Launch(Container& c) {
    auto pid = StartProcess(c.process);
    if (!pid.ok()) {
      c.state.phase = ContainerState::Phase::kWaiting;
      c.state.reason = "RunContainerError";
      c.state.message = pid.status().message();
      c.done = true;
      return;
    }
    c.pid = *pid;
    c.start_ticks = ProcessStartTime(c.pid);
    c.state.phase = ContainerState::Phase::kRunning;
    c.state.reason.clear();
    c.state.message.clear();
    c.state.started_at = Now();
    StartProbes(c);
  }

  // The probes of a new (or adopted) run of the container, from its spec.
  void StartProbes(Container& c) {
    const auto now = agent_->clock_->Now();
    c.startup.reset();
    c.liveness.reset();
    c.readiness.reset();
    for (auto [field, tracker] :
         {std::pair{"startupProbe", &c.startup}, std::pair{"livenessProbe", &c.liveness},
          std::pair{"readinessProbe", &c.readiness}}) {
      if (!c.spec.contains(field)) continue;
      auto probe = ParseProbe(c.spec[field], c.spec, field);
      if (!probe.ok()) {
        Warn(probe.status().message() + "; the probe is ignored");
        continue;
      }
      tracker->emplace(*probe, now);
    }
    c.state.started = !c.startup.has_value();
    c.state.probe_ready = !c.readiness.has_value();
  }

  // Runs the probes that are due; returns true when the container's status changed. A failed
  // startup or liveness probe kills the container; the restart policy decides what follows.
  bool RunProbes(Container& c) {
    const auto now = agent_->clock_->Now();
    auto run = [&](ProbeTracker& t, const char* which) {
      std::string detail;
      bool ok = RunProbe(t.probe(), ip_, c.process.env, c.process.working_dir,
                         c.process.mount_namespace, c.pid, &detail);
      t.Record(ok, agent_->clock_->Now());
      if (!ok)
        Warn(std::string(which) + " probe of container " + c.state.name + " failed: " + detail);
    };
    bool changed = false;
    if (c.startup && !c.startup->succeeded()) {
      if (!c.startup->Due(now)) return false;
      run(*c.startup, "startup");
      if (c.startup->failed()) {
        Warn("container " + c.state.name + " failed its startup probe; killing it");
        SignalGroup(c.pid, SIGKILL);
        return false;
      }
      if (!c.startup->succeeded()) return false;
      c.state.started = true;
      changed = true;
      // Liveness and readiness start now, after their own initial delays.
      if (c.liveness) c.liveness = ProbeTracker(Probe(c.liveness->probe()), now);
      if (c.readiness) c.readiness = ProbeTracker(Probe(c.readiness->probe()), now);
    }
    if (c.liveness && c.liveness->Due(now)) {
      run(*c.liveness, "liveness");
      if (c.liveness->failed()) {
        Warn("container " + c.state.name + " failed its liveness probe; killing it");
        SignalGroup(c.pid, SIGKILL);
        return changed;
      }
    }
    if (c.readiness && c.readiness->Due(now)) {
      run(*c.readiness, "readiness");
      if (c.readiness->succeeded() != c.state.probe_ready) {
        c.state.probe_ready = c.readiness->succeeded();
        changed = true;
      }
    }
    return changed;
  }

  void Run() {
    for (const auto& spec : pod_["spec"].value("containers", json::array())) {
      Container c;
      c.spec = spec;
      c.state.name = spec.value("name", "");
      containers_.push_back(std::move(c));
    }
    const std::string policy = pod_["spec"].value("restartPolicy", "Always");
    agent_->RewriteHostsFiles(ns_);
    // Configuration errors (a missing Secret, an image without executable) keep the pod
    // Pending with the reason, and are retried, as with a kubelet.
    for (;;) {
      Status s = Prepare();
      if (s.ok()) break;
      if (adopted_.is_object()) {  // its processes run: adopt them; restarts will fail
        Warn("preparing the adopted pod again: " + s.message());
        break;
      }
      for (auto& c : containers_) {
        c.state.phase = ContainerState::Phase::kWaiting;
        c.state.reason = "CreateContainerConfigError";
        c.state.message = s.message();
      }
      PostStatus();
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::seconds(5), [this] { return delete_requested_; })) {
        lock.unlock();
        Finish();
        return;
      }
    }
    agent_->RewriteHostsFiles(ns_);
    for (auto& c : containers_) {
      if (!adopted_.is_object() || !Adopt(c)) Launch(c);
    }
    PostStatus();
    for (;;) {
      bool changed = false;
      bool deleting;
      {
        std::lock_guard<std::mutex> lock(mu_);
        deleting = delete_requested_;
      }
      auto now = agent_->clock_->Now();
      for (auto& c : containers_) {
        if (c.pid > 0) {
          ExitInfo info;
          if (!Poll(c, &info)) {
            if (!deleting && RunProbes(c)) changed = true;
            continue;
          }
          c.state.probe_ready = false;
          SignalGroup(c.pid, SIGKILL);  // the container ends with its main process
          c.pid = 0;
          changed = true;
          json term = {{"exitCode", info.code},
                       {"reason", info.code == 0 ? "Completed" : "Error"},
                       {"startedAt", c.state.started_at},
                       {"finishedAt", Now()}};
          if (info.signal != 0) term["signal"] = info.signal;
          bool restart =
              !deleting && (policy == "Always" || (policy == "OnFailure" && info.code != 0));
          if (restart) {
            c.state.last_terminated = term;
            c.state.phase = ContainerState::Phase::kWaiting;
            c.state.reason = "CrashLoopBackOff";
            c.state.restart_count++;
            c.restart_at = now + c.backoff.Next();
          } else {
            c.state.phase = ContainerState::Phase::kTerminated;
            c.state.exit_code = info.code;
            c.state.signal = info.signal;
            c.state.reason = term["reason"];
            c.state.finished_at = term["finishedAt"];
            c.done = true;
          }
        } else if (!c.done && c.state.phase == ContainerState::Phase::kWaiting &&
                   c.state.restart_count > 0 && now >= c.restart_at && !deleting) {
          Launch(c);
          changed = true;
        }
      }
      if (changed || (status_pending_ && agent_->clock_->Now() >= status_retry_at_)) PostStatus();
      if (!deleting) RefreshTokens();
      std::unique_lock<std::mutex> lock(mu_);
      if (delete_requested_) break;
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (delete_requested_) break;
    }
    Finish();
  }

  // Graceful stop: SIGTERM, up to the grace period, SIGKILL; then the final delete.
  void Finish() {
    int grace;
    {
      std::lock_guard<std::mutex> lock(mu_);
      grace = grace_s_;
    }
    // As a container runtime does: SIGTERM to the main process only; whatever else runs in
    // the container (its process group) goes when the main process is gone.
    for (auto& c : containers_) {
      if (c.pid > 0) kill(c.pid, SIGTERM);
    }
    auto deadline = agent_->clock_->Now() + std::chrono::seconds(grace);
    for (;;) {
      bool running = false;
      for (auto& c : containers_) {
        ExitInfo info;
        if (c.pid > 0 && Poll(c, &info)) {
          SignalGroup(c.pid, SIGKILL);
          c.pid = 0;
          c.state.phase = ContainerState::Phase::kTerminated;
          c.state.exit_code = info.code;
          c.state.signal = info.signal;
          c.state.reason = info.code == 0 ? "Completed" : "Error";
          c.state.finished_at = Now();
        }
        running = running || c.pid > 0;
      }
      if (!running) break;
      if (agent_->clock_->Now() >= deadline) {
        for (auto& c : containers_) {
          if (c.pid > 0) SignalGroup(c.pid, SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    bool gone, keep_state;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gone = gone_;
      keep_state = keep_state_;
    }
    if (!gone) {
      kube::DeleteOptions d;
      d.grace_period_seconds = 0;
      d.precondition_uid = uid_;
      auto r = agent_->client_->Delete(res::kPods, ns_, name_, d);
      if (!r.ok() && !kube::IsNotFound(r.error()) && r.error().code != 409) {
        Warn("final delete: " + r.error().ToString());
      }
    }
    std::error_code ec;
    if (!keep_state) {  // the pod is deleted: nothing left to adopt
      fs::remove(StateFile(), ec);
      fs::remove_all(dir_ + "/containers", ec);
    }
    fs::remove_all(dir_ + "/volumes", ec);                          // emptyDirs die with the pod
    for (const auto& p : created_mount_points_) fs::remove(p, ec);  // only when empty
  }

  NodeAgent* agent_;
  json pod_;
  std::string ip_, ns_, name_, uid_, hostname_, subdomain_, dir_, hosts_file_, start_time_;
  json adopted_;                       // state.json of the previous agent, or null
  std::vector<Container> containers_;  // only the worker thread touches these
  std::vector<std::string> created_mount_points_;
  std::vector<TokenFile> tokens_;  // only the worker thread touches these
  bool status_pending_ = false;    // the last status was not taken; worker thread only
  Clock::TimePoint status_retry_at_{};
  std::mutex mu_;
  std::condition_variable cv_;
  bool delete_requested_ = false;  // GUARDED_BY(mu_)
  bool gone_ = false;              // GUARDED_BY(mu_)
  bool keep_state_ = false;        // GUARDED_BY(mu_)
  int grace_s_ = 30;               // GUARDED_BY(mu_)
  std::jthread thread_;
};

NodeAgent::NodeAgent(kube::Client* client, Clock* clock, NodeAgentOptions options, EventLog* log)
    : client_(client), clock_(clock), options_(std::move(options)), log_(log) {}

NodeAgent::~NodeAgent() {
  std::map<std::string, std::shared_ptr<PodWorker>> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers.swap(workers_);
  }
  workers.clear();  // each destructor stops its pod
}

json NodeAgent::NodeObject() const {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  std::string mem = std::to_string(pages * (page / 1024)) + "Ki";
  json capacity = {{"cpu", std::to_string(std::thread::hardware_concurrency())},
                   {"memory", mem},
                   {"pods", "110"},
                   {"ephemeral-storage", "100Gi"}};
  if (int g = GpuCount(); g > 0) capacity["nvidia.com/gpu"] = std::to_string(g);
  std::string now = Now();
  auto cond = [&](const char* type, const char* status, const char* reason, const char* msg) {
    return json{{"type", type},   {"status", status},         {"reason", reason},
                {"message", msg}, {"lastHeartbeatTime", now}, {"lastTransitionTime", now}};
  };
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", options_.node_name},
            {"labels",
             {{"kubernetes.io/hostname", options_.node_name},
              {"kubernetes.io/os", "linux"},
              {"kubernetes.io/arch", "amd64"},
              {"tjo.dev/local-node", "true"}}}}},
          {"status",
           {{"capacity", capacity},
            {"allocatable", capacity},
            {"conditions",
             json::array(
                 {cond("Ready", "True", "KubeletReady", "tj-local-node is posting ready status"),
                  cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
                  cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
                  cond("PIDPressure", "False", "KubeletHasSufficientPID", "ok")})},
            {"addresses", json::array({{{"type", "InternalIP"}, {"address", options_.host_ip}}})},
            {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", options_.kubelet_port}}}}},
            {"nodeInfo",
             {{"machineID", ""},
              {"systemUUID", ""},
              {"bootID", ""},
              {"kernelVersion", ""},
              {"osImage", "tj-local-node"},
              {"containerRuntimeVersion", "tj-local://0.1"},
              {"kubeletVersion", "v1.20.2"},
              {"kubeProxyVersion", "v1.20.2"},
              {"operatingSystem", "linux"},
              {"architecture", "amd64"}}}}}};
}

Status NodeAgent::Register() {
  json node = NodeObject();
  auto created = client_->Create(res::kNodes, "", node);
  if (!created.ok() && !kube::IsAlreadyExists(created.error())) {
    return created.error().ToStatus().WithContext("registering node " + options_.node_name);
  }
  TJ_RETURN_IF_ERROR(Heartbeat());
  // The API server taints a new Node not-ready; we are ready, so clear it (the node lifecycle
  // controller would do the same from our Ready condition, when it runs).
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto cur = client_->Get(res::kNodes, "", options_.node_name);
    if (!cur.ok()) return cur.error().ToStatus().WithContext("reading node " + options_.node_name);
    json n = *cur;
    json taints = json::array();
    bool had = false;
    for (const auto& t : n["spec"].value("taints", json::array())) {
      if (t.value("key", "") == "node.kubernetes.io/not-ready") {
        had = true;
      } else {
        taints.push_back(t);
      }
    }
    if (!had) return Status::Ok();
    n["spec"]["taints"] = taints;
    auto u = client_->Update(res::kNodes, "", n);
    if (u.ok()) return Status::Ok();
    if (!kube::IsConflict(u.error())) return u.error().ToStatus();
  }
  return Status::Error("could not clear the not-ready taint of node " + options_.node_name);
}

Status NodeAgent::Heartbeat() {
  json status = NodeObject()["status"];
  auto r = client_->Patch(res::kNodes, "", options_.node_name, kube::PatchType::kMerge,
                          {{"status", status}}, {"", false, "status"});
  if (!r.ok()) return r.error().ToStatus().WithContext("node status heartbeat");
  std::string now = kube::FormatMicroTime(std::chrono::system_clock::now());
  json lease = {
      {"apiVersion", "coordination.k8s.io/v1"},
      {"kind", "Lease"},
      {"metadata", {{"name", options_.node_name}, {"namespace", "kube-node-lease"}}},
      {"spec",
       {{"holderIdentity", options_.node_name}, {"leaseDurationSeconds", 40}, {"renewTime", now}}}};
  auto cur = client_->Get(res::kLeases, "kube-node-lease", options_.node_name);
  if (cur.ok()) {
    json l = *cur;
    l["spec"]["renewTime"] = now;
    l["spec"]["holderIdentity"] = options_.node_name;
    auto u = client_->Update(res::kLeases, "kube-node-lease", l);
    if (!u.ok()) return u.error().ToStatus().WithContext("node lease heartbeat");
  } else if (kube::IsNotFound(cur.error())) {
    auto c = client_->Create(res::kLeases, "kube-node-lease", lease);
    if (!c.ok()) return c.error().ToStatus().WithContext("node lease heartbeat");
  } else {
    return cur.error().ToStatus().WithContext("node lease heartbeat");
  }
  return Status::Ok();
}

std::string NodeAgent::AllocateIp() {
  // Caller holds mu_. Skips the addresses of running and adoptable pods (after a restart
  // the counter starts again from the first address).
  std::set<std::string> used;
  for (const auto& [uid, w] : workers_) used.insert(w->ip());
  for (const auto& [uid, state] : adoptable_) used.insert(state.value("ip", ""));
  for (;;) {
    std::string ip = LoopbackAddress(next_ip_++, options_.pod_network);
    if (!used.count(ip)) return ip;
  }
}

void NodeAgent::LoadPodStates() {
  std::error_code ec;
  const fs::path pods = options_.state_dir + "/pods";
  if (!fs::is_directory(pods, ec)) return;
  std::map<std::string, json> found;
  for (const auto& entry : fs::directory_iterator(pods, ec)) {
    const fs::path file = entry.path() / "state.json";
    if (!fs::exists(file, ec)) continue;
    std::ifstream in(file);
    json state = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!state.is_object() || state.value("uid", "") != entry.path().filename().string()) {
      log_->Warn("ignoring " + file.string() +
                 ": not a pod state written by tj-local-node (remove it if it is stale)");
      continue;
    }
    found[state.value("uid", "")] = state;
  }
  if (found.empty()) return;
  log_->Emit({{"event", "pods_to_adopt"}, {"count", found.size()}});
  std::lock_guard<std::mutex> lock(mu_);
  adoptable_ = std::move(found);
}

void NodeAgent::StopOrphans() {
  std::map<std::string, json> orphans;
  {
    std::lock_guard<std::mutex> lock(mu_);
    orphans.swap(adoptable_);
  }
  for (const auto& [uid, state] : orphans) {
    // A pod deleted (or finished) while no agent ran: its processes have nobody to report to.
    for (const auto& c : state.value("containers", json::array())) {
      const pid_t pid = c.value("pid", 0);
      if (pid > 0 && ProcessStartTime(pid) == c.value("startTicks", 0ULL)) {
        log_->Warn("pod " + state.value("namespace", "") + "/" + state.value("name", "") +
                   " (uid " + uid + ") is no longer running here; killing its container " +
                   c.value("name", "") + " (pid " + std::to_string(pid) + ")");
        SignalGroup(pid, SIGKILL);
      }
    }
    std::error_code ec;
    fs::remove_all(options_.state_dir + "/pods/" + uid, ec);
  }
}

void NodeAgent::OnPod(const json& pod) {
  const json md = pod.value("metadata", json::object());
  const std::string uid = md.value("uid", "");
  const std::string phase = pod.value("status", json::object()).value("phase", "");
  std::shared_ptr<PodWorker> w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(uid);
    if (it == workers_.end()) {
      // Ran before a restart of ours: StopOrphans cleans up its state.
      if (phase == "Succeeded" || phase == "Failed") return;
      json adopted = nullptr;
      if (auto a = adoptable_.find(uid); a != adoptable_.end()) {
        adopted = a->second;
        adoptable_.erase(a);
      }
      if (md.contains("deletionTimestamp") && adopted.is_null()) {
        // Deleted before it ran here: nothing to stop, just let it go.
        kube::DeleteOptions d;
        d.grace_period_seconds = 0;
        d.precondition_uid = uid;
        client_->Delete(res::kPods, md.value("namespace", ""), md.value("name", ""), d).ok();
        return;
      }
      const std::string ip = adopted.is_null() ? AllocateIp() : adopted.value("ip", "");
      w = std::make_shared<PodWorker>(this, pod, ip, adopted);
      workers_[uid] = w;
      w->Start();
    } else {
      w = it->second;
    }
  }
  if (md.contains("deletionTimestamp")) {
    int grace = md.value("deletionGracePeriodSeconds",
                         pod["spec"].value("terminationGracePeriodSeconds", 30));
    w->RequestDelete(grace);
  }
}

void NodeAgent::OnPodDeleted(const json& pod) {
  const std::string uid = pod["metadata"].value("uid", "");
  std::shared_ptr<PodWorker> w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(uid);
    if (it == workers_.end()) return;
    w = it->second;
    workers_.erase(it);
  }
  w->MarkGone();
  w->RequestDelete(0);
  std::string ns = w->ns();
  // The last reference joins the worker's thread: do that off the informer's thread.
  std::thread([w = std::move(w)] {}).detach();
  RewriteHostsFiles(ns);
}

void NodeAgent::RewriteHostsFiles(const std::string& ns) {
  std::vector<std::shared_ptr<PodWorker>> same_ns;
  std::vector<HostEntry> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [uid, w] : workers_) {
      if (w->ns() != ns) continue;
      same_ns.push_back(w);
      entries.push_back(w->Entry());
    }
  }
  std::error_code ec;
  for (const auto& w : same_ns) {
    fs::create_directories(fs::path(w->hosts_file()).parent_path(), ec);
    WriteFileInPlace(w->hosts_file(), HostsFile(w->ip(), w->hostname(), entries));
  }
}

void NodeAgent::ProvisionClaim(const json& pvc) {
  const json md = pvc.value("metadata", json::object());
  const json spec = pvc.value("spec", json::object());
  if (!spec.value("volumeName", "").empty() || md.contains("deletionTimestamp")) return;
  const std::string ns = md.value("namespace", ""), name = md.value("name", "");
  const std::string uid = md.value("uid", "");
  const std::string pv_name = "pvc-" + uid;
  const std::string dir = options_.state_dir + "/pvc/" + ns + "/" + name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const json storage = spec.value("resources", json::object())
                           .value("requests", json::object())
                           .value("storage", json("1Gi"));
  const json modes = spec.value("accessModes", json::array({"ReadWriteOnce"}));
  json pv = {{"apiVersion", "v1"},
             {"kind", "PersistentVolume"},
             {"metadata",
              {{"name", pv_name},
               {"labels", {{"tjo.dev/local-node", options_.node_name}}},
               {"annotations", {{"pv.kubernetes.io/provisioned-by", "tj-local-node"}}}}},
             {"spec",
              {{"capacity", {{"storage", storage}}},
               {"accessModes", modes},
               {"persistentVolumeReclaimPolicy", "Delete"},
               {"storageClassName", spec.value("storageClassName", "")},
               {"hostPath", {{"path", fs::weakly_canonical(fs::absolute(dir), ec).string()}}},
               {"claimRef",
                {{"apiVersion", "v1"},
                 {"kind", "PersistentVolumeClaim"},
                 {"namespace", ns},
                 {"name", name},
                 {"uid", uid}}}}}};
  auto created = client_->Create(res::kPersistentVolumes, "", pv);
  if (!created.ok() && !kube::IsAlreadyExists(created.error())) {
    log_->Warn("provisioning a volume for claim " + ns + "/" + name + ": " +
               created.error().ToString());
    return;
  }
  client_
      ->Patch(res::kPersistentVolumes, "", pv_name, kube::PatchType::kMerge,
              {{"status", {{"phase", "Bound"}}}}, {"", false, "status"})
      .ok();
  // What the volume binder writes; the scheduler treats the claim as bound only with both.
  json bind = {{"metadata",
                {{"annotations",
                  {{"pv.kubernetes.io/bind-completed", "yes"},
                   {"pv.kubernetes.io/bound-by-controller", "yes"}}}}},
               {"spec", {{"volumeName", pv_name}}}};
  auto bound =
      client_->Patch(res::kPersistentVolumeClaims, ns, name, kube::PatchType::kMerge, bind);
  if (!bound.ok()) {
    log_->Warn("binding claim " + ns + "/" + name + ": " + bound.error().ToString());
    return;
  }
  client_
      ->Patch(
          res::kPersistentVolumeClaims, ns, name, kube::PatchType::kMerge,
          {{"status",
            {{"phase", "Bound"}, {"accessModes", modes}, {"capacity", {{"storage", storage}}}}}},
          {"", false, "status"})
      .ok();
}

std::string NodeAgent::LogFile(const std::string& ns, const std::string& pod,
                               const std::string& container) const {
  std::string f = options_.log_dir + "/pods/" + SafeName(ns) + "_" + SafeName(pod) + "_" +
                  SafeName(container) + ".log";
  return fs::exists(f) ? f : "";
}

void NodeAgent::StartLogServer() {
  using web::http::http_request;
  using web::http::experimental::listener::http_listener;
  using web::http::experimental::listener::http_listener_config;
  http_listener_config cfg;
  std::string cert = options_.tls_cert_file, key = options_.tls_key_file;
  cfg.set_ssl_context_callback([cert, key](boost::asio::ssl::context& ctx) {
    ctx.use_certificate_chain_file(cert);
    ctx.use_private_key_file(key, boost::asio::ssl::context::pem);
  });
  std::string url = "https://" + options_.host_ip + ":" + std::to_string(options_.kubelet_port);
  auto listener = std::make_shared<http_listener>(url, cfg);
  listener->support(web::http::methods::GET, [this](const http_request& req) {
    // /containerLogs/<ns>/<pod>/<container>
    auto parts = web::uri::split_path(web::uri::decode(req.relative_uri().path()));
    if (parts.size() == 4 && parts[0] == "containerLogs") {
      std::string f = LogFile(parts[1], parts[2], parts[3]);
      if (!f.empty()) {
        std::ifstream in(f);
        std::stringstream ss;
        ss << in.rdbuf();
        std::string body = ss.str();
        auto q = web::uri::split_query(req.relative_uri().query());
        if (auto it = q.find("tailLines"); it != q.end()) {
          int n = std::max(0, std::atoi(it->second.c_str()));
          size_t pos = body.size();
          if (!body.empty() && body.back() == '\n') --pos;
          for (int i = 0; i < n && pos != std::string::npos && pos > 0; ++i) {
            pos = body.rfind('\n', pos - 1);
          }
          if (pos != std::string::npos && pos > 0) body = body.substr(pos + 1);
        }
        // As the kubelet: at most limitBytes of the selected output, from its start.
        if (auto it = q.find("limitBytes"); it != q.end()) {
          const long long limit = std::atoll(it->second.c_str());
          if (limit > 0 && static_cast<size_t>(limit) < body.size()) body.resize(limit);
        }
        req.reply(web::http::status_codes::OK, body, "text/plain").wait();
        return;
      }
    }
    req.reply(web::http::status_codes::NotFound, "no such container log\n", "text/plain").wait();
  });
  try {
    listener->open().wait();
    log_server_ = listener;
  } catch (const std::exception& e) {
    log_->Warn("log endpoint " + url + " did not start (kubectl logs will not work): " + e.what());
  }
}

Status NodeAgent::Run(const std::stop_token& stop) {
  std::error_code ec;
  fs::create_directories(options_.state_dir, ec);
  fs::create_directories(options_.log_dir + "/pods", ec);
  if (options_.kubelet_port > 0 && !options_.tls_cert_file.empty()) StartLogServer();
  TJ_RETURN_IF_ERROR(Register());
  LoadPodStates();  // before the first pod event
  kube::InformerOptions io;
  io.resource = res::kPods;
  io.field_selector = "spec.nodeName=" + options_.node_name;
  pods_ = std::make_unique<kube::Informer>(client_, clock_, io, log_);
  pods_->AddHandlers({[this](const json& p) { OnPod(p); },
                      [this](const json&, const json& p) { OnPod(p); },
                      [this](const json& p) { OnPodDeleted(p); }});
  pods_->Start();
  kube::InformerOptions co;
  co.resource = res::kPersistentVolumeClaims;
  claims_ = std::make_unique<kube::Informer>(client_, clock_, co, log_);
  claims_->AddHandlers({[this](const json& c) { ProvisionClaim(c); },
                        [this](const json&, const json& c) { ProvisionClaim(c); },
                        {}});
  claims_->Start();
  log_->Emit({{"event", "node_ready"}, {"node", options_.node_name}});
  std::mutex m;
  std::condition_variable_any cv;
  bool orphans_stopped = false;
  while (!stop.stop_requested()) {
    {
      std::unique_lock<std::mutex> lock(m);
      cv.wait_for(lock, stop, options_.heartbeat, [] { return false; });
    }
    if (stop.stop_requested()) break;
    // Once the first list has been handed to OnPod, what was not adopted has no pod here.
    if (!orphans_stopped && pods_->HasSynced()) {
      StopOrphans();
      orphans_stopped = true;
    }
    Status s = Heartbeat();
    if (!s.ok()) log_->Warn(s.message());
  }
  pods_->Stop();
  claims_->Stop();
  std::map<std::string, std::shared_ptr<PodWorker>> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers.swap(workers_);
  }
  // Stop the processes, all at once; leave the pods to the server and their state to the
  // next agent.
  for (auto& [uid, w] : workers) w->StopForAgentShutdown(kShutdownGraceSeconds);
  workers.clear();
  if (log_server_) {
    std::static_pointer_cast<web::http::experimental::listener::http_listener>(log_server_)
        ->close()
        .wait();
  }
  return Status::Ok();
}

}  // namespace tj::localnode
