#include "processnode/pod_worker.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kube/config.h"
#include "kube/time_format.h"
#include "processnode/node_agent.h"
#include "processnode/service_account.h"

namespace tj::processnode {

namespace fs = std::filesystem;
namespace res = kube::resources;

namespace {

std::string Now() { return kube::FormatTime(std::chrono::system_clock::now()); }

}  // namespace

PodWorker::PodWorker(PodWorkerContext context, const json& pod, std::string ip, json adopted)
    : context_(std::move(context)),
      pod_(pod),
      pod_ip_(std::move(ip)),
      adopted_(std::move(adopted)) {
  const json md = pod.value("metadata", json::object());
  namespace_ = md.value("namespace", "");
  name_ = md.value("name", "");
  uid_ = md.value("uid", "");
  hostname_ = pod["spec"].value("hostname", name_);
  subdomain_ = pod["spec"].value("subdomain", "");
  dir_ = context_.options->state_dir + "/pods/" + uid_;
  hosts_file_ = dir_ + "/etc-hosts";
  start_time_ = adopted_.is_object() ? adopted_.value("startTime", Now()) : Now();
}

PodWorker::~PodWorker() {
  if (thread_.joinable()) {
    RequestDelete(0);
    thread_.join();
  }
}

void PodWorker::Start() {
  thread_ = std::jthread([this](const std::stop_token&) { Run(); });
}

void PodWorker::RequestDelete(int grace_s) {
  MutexLock lock(mu_);
  if (delete_requested_) return;
  delete_requested_ = true;
  grace_s_ = grace_s;
  cv_.notify_all();
}

void PodWorker::MarkGone() {
  MutexLock lock(mu_);
  gone_ = true;
}

void PodWorker::StopForAgentShutdown(int max_grace_s) {
  {
    MutexLock lock(mu_);
    gone_ = true;
    keep_state_ = true;
  }
  RequestDelete(std::min(max_grace_s, pod_["spec"].value("terminationGracePeriodSeconds", 30)));
}

std::string PodWorker::LogFile(const std::string& container) const {
  return context_.options->log_dir + "/pods/" + namespace_ + "_" + name_ + "_" + container + ".log";
}

void PodWorker::Warn(const std::string& m) {
  context_.log->Warn("pod " + namespace_ + "/" + name_ + ": " + m);
}

Status PodWorker::Prepare() {
  tokens_.clear();
  created_mount_points_.clear();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  fs::create_directories(context_.options->log_dir + "/pods", ec);
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
    auto argv = ContainerArgv(c.spec, context_.options->bin_dir);
    if (!argv.ok()) return argv.status();
    auto env = ContainerEnv(pod_, c.spec, pod_ip_, context_.options->node_name, lookup);
    if (!env.ok()) return env.status();
    c.process = ProcessSpec{};  // Prepare() may run again after a configuration error
    c.process.argv = *argv;
    // HOME is the pod's own directory, not the host user's: a container never sees the
    // host's ~/.kube/config (an in-cluster client would take it over its ServiceAccount).
    c.process.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                     "HOME=" + dir_, "HOSTNAME=" + hostname_, "TJ_POD_IP=" + pod_ip_};
    for (const auto& e : *env) c.process.env.push_back(e);
    // What a kubelet adds for the `kubernetes` Service, here the API server's real address
    // (the Service's cluster IP is not routed on this machine). The pod's own env wins.
    auto defined = [&](const std::string& var) {
      return std::any_of(env->begin(), env->end(),
                         [&](const std::string& e) { return e.rfind(var + "=", 0) == 0; });
    };
    if (!context_.options->api_server.empty()) {
      auto service_env = KubernetesServiceEnv(context_.options->api_server);
      if (!service_env.ok()) return service_env.status();
      for (const auto& e : *service_env) {
        if (!defined(e.substr(0, e.find('=')))) c.process.env.push_back(e);
      }
    }
    if (!context_.options->mount_namespace && MountsServiceAccount(c.spec)) {
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
          kubeconfig, ServiceAccountKubeconfig(context_.options->api_server, sa_dir + "/ca.crt",
                                               sa_dir + "/token", namespace_)));
      c.process.env.push_back("TJ_SERVICE_ACCOUNT_DIR=" + sa_dir);
      if (!defined("KUBECONFIG")) c.process.env.push_back("KUBECONFIG=" + kubeconfig);
    }
    c.process.working_dir = c.spec.value("workingDir", "");
    if (c.process.working_dir.empty()) c.process.working_dir = dir_;
    c.process.log_file = LogFile(cname);
    c.process.exit_file = ExitFile(cname);
    fs::create_directories(fs::path(c.process.exit_file).parent_path(), ec);
    c.process.mount_namespace = context_.options->mount_namespace;
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
        Warn("volume mounts need a mount namespace (run tj-process-node as root); container " +
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

std::string PodWorker::ExitFile(const std::string& container) const {
  return dir_ + "/containers/" + container + ".exit";
}

void PodWorker::SaveState() {
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
  json state = {{"uid", uid_},   {"namespace", namespace_},  {"name", name_},
                {"ip", pod_ip_}, {"startTime", start_time_}, {"containers", containers}};
  Status s = WriteVolumeFile(StateFile(), state.dump());
  if (!s.ok()) Warn("saving the pod's state (a restarted agent cannot adopt it): " + s.message());
}

bool PodWorker::Adopt(Container& c) {
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
    context_.log->Emit({{"event", "container_adopted"},
                        {"pod", namespace_ + "/" + name_},
                        {"container", c.state.name},
                        {"pid", pid}});
    return true;
  }
  return false;
}

bool PodWorker::Poll(const Container& c, ExitInfo* info) {
  bool lost = false;
  if (!PollSupervised(c.pid, c.start_ticks, ExitFile(c.state.name), info, &lost)) return false;
  if (lost) {
    Warn("container " + c.state.name + " (pid " + std::to_string(c.pid) +
         ") ended while no agent watched it and left no exit status; reported as exit code " +
         std::to_string(info->code));
  }
  return true;
}

void PodWorker::PostStatus() {
  SaveState();
  std::vector<ContainerState> states;
  for (const auto& c : containers_) states.push_back(c.state);
  json status = PodStatus(pod_, states, pod_ip_, context_.options->host_ip, start_time_, Now());
  auto r = context_.client->Patch(res::kPods, namespace_, name_, kube::PatchType::kMerge,
                                  {{"status", status}}, {"", false, "status"});
  // A status the API server did not take (it restarts, say) is sent again by the main
  // loop, or a pod that ended meanwhile would stay Running on the server for good.
  status_pending_ = !r.ok() && !kube::IsNotFound(r.error());
  if (status_pending_) {
    Warn("status update (retried in 1 s): " + r.error().ToString());
    status_retry_at_ = context_.clock->Now() + std::chrono::seconds(1);
  }
}

void PodWorker::Launch(Container& c) {
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

void PodWorker::StartProbes(Container& c) {
  const auto now = context_.clock->Now();
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

bool PodWorker::RunProbes(Container& c) {
  const auto now = context_.clock->Now();
  auto run = [&](ProbeTracker& t, const char* which) {
    std::string detail;
    bool ok = RunProbe(t.probe(), pod_ip_, c.process.env, c.process.working_dir,
                       c.process.mount_namespace, c.pid, &detail);
    t.Record(ok, context_.clock->Now());
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

void PodWorker::Run() {
  for (const auto& spec : pod_["spec"].value("containers", json::array())) {
    Container c;
    c.spec = spec;
    c.state.name = spec.value("name", "");
    containers_.push_back(std::move(c));
  }
  const std::string policy = pod_["spec"].value("restartPolicy", "Always");
  context_.rewrite_hosts_files(namespace_);
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
    MutexLock lock(mu_);
    if (cv_.wait_for(lock, std::chrono::seconds(5), [this] {
          mu_.AssertHeld();
          return delete_requested_;
        })) {
      lock.unlock();
      Finish();
      return;
    }
  }
  context_.rewrite_hosts_files(namespace_);
  for (auto& c : containers_) {
    if (!adopted_.is_object() || !Adopt(c)) Launch(c);
  }
  PostStatus();
  for (;;) {
    bool changed = false;
    bool deleting;
    {
      MutexLock lock(mu_);
      deleting = delete_requested_;
    }
    auto now = context_.clock->Now();
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
    if (changed || (status_pending_ && context_.clock->Now() >= status_retry_at_)) PostStatus();
    if (!deleting) RefreshTokens();
    MutexLock lock(mu_);
    if (delete_requested_) break;
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (delete_requested_) break;
  }
  Finish();
}

void PodWorker::Finish() {
  int grace;
  {
    MutexLock lock(mu_);
    grace = grace_s_;
  }
  // As a container runtime does: SIGTERM to the main process only; whatever else runs in
  // the container (its process group) goes when the main process is gone.
  for (auto& c : containers_) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  auto deadline = context_.clock->Now() + std::chrono::seconds(grace);
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
    if (context_.clock->Now() >= deadline) {
      for (auto& c : containers_) {
        if (c.pid > 0) SignalGroup(c.pid, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  bool gone, keep_state;
  {
    MutexLock lock(mu_);
    gone = gone_;
    keep_state = keep_state_;
  }
  if (!gone) {
    kube::DeleteOptions d;
    d.grace_period_seconds = 0;
    d.precondition_uid = uid_;
    auto r = context_.client->Delete(res::kPods, namespace_, name_, d);
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

}  // namespace tj::processnode
