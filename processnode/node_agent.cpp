#include "processnode/node_agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "kube/config.h"
#include "kube/object_meta.h"
#include "kube/time_format.h"
#include "processnode/pod_worker.h"
#include "processnode/process.h"

namespace tj::processnode {

namespace fs = std::filesystem;
using nlohmann::json;
namespace res = kube::resources;

namespace {

// The longest a node shutdown (SIGTERM to the agent) waits for a pod's processes to end after
// their SIGTERM: less than the 10 s `hack/local-cluster.sh down` gives the agent itself.
constexpr int kShutdownGraceSeconds = 5;

int GpuCount() {
  int n = 0;
  for (int i = 0; i < 64; ++i) {
    if (fs::exists("/dev/nvidia" + std::to_string(i))) ++n;
  }
  return n;
}

void WriteFileInPlace(const std::string& path, const std::string& content) {
  // Truncate and write the same inode: a bind mount of it sees the new content.
  std::ofstream out(path, std::ios::trunc);
  out << content;
}

}  // namespace

NodeAgent::NodeAgent(kube::Client* client, Clock* clock, NodeAgentOptions options, EventLog* log)
    : client_(client), clock_(clock), options_(std::move(options)), log_(log) {}

NodeAgent::~NodeAgent() {
  std::map<std::string, std::shared_ptr<PodWorker>> workers;
  {
    MutexLock lock(mu_);
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
  std::string now = kube::FormatTime(std::chrono::system_clock::now());
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
              {"tjo.dev/local-node", "true"}}}}},  // the label's name from before tj-process-node
          {"status",
           {{"capacity", capacity},
            {"allocatable", capacity},
            {"conditions",
             json::array(
                 {cond("Ready", "True", "KubeletReady", "tj-process-node is posting ready status"),
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
              {"osImage", "tj-process-node"},
              {"containerRuntimeVersion", "tj-local://0.1"},
              {"kubeletVersion", options_.kubelet_version},
              {"kubeProxyVersion", options_.kubelet_version},
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
  // Skips the addresses of running and adoptable pods (after a restart
  // the counter starts again from the first address).
  std::set<std::string> used;
  for (const auto& [uid, w] : workers_) used.insert(w->pod_ip());
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
                 ": not a pod state written by tj-process-node (remove it if it is stale)");
      continue;
    }
    found[state.value("uid", "")] = state;
  }
  if (found.empty()) return;
  log_->Emit({{"event", "pods_to_adopt"}, {"count", found.size()}});
  MutexLock lock(mu_);
  adoptable_ = std::move(found);
}

void NodeAgent::StopOrphans() {
  std::map<std::string, json> orphans;
  {
    MutexLock lock(mu_);
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
    MutexLock lock(mu_);
    auto it = workers_.find(uid);
    if (it == workers_.end()) {
      // Ran before a restart of ours: StopOrphans cleans up its state.
      if (phase == "Succeeded" || phase == "Failed") return;
      json adopted = nullptr;
      if (auto a = adoptable_.find(uid); a != adoptable_.end()) {
        adopted = a->second;
        adoptable_.erase(a);
      }
      if (kube::IsBeingDeleted(pod) && adopted.is_null()) {
        // Deleted before it ran here: nothing to stop, just let it go.
        kube::DeleteOptions d;
        d.grace_period_seconds = 0;
        d.precondition_uid = uid;
        client_->Delete(res::kPods, md.value("namespace", ""), md.value("name", ""), d).ok();
        return;
      }
      const std::string ip = adopted.is_null() ? AllocateIp() : adopted.value("ip", "");
      w = std::make_shared<PodWorker>(WorkerContext(), pod, ip, adopted);
      workers_[uid] = w;
      w->Start();
    } else {
      w = it->second;
    }
  }
  if (kube::IsBeingDeleted(pod)) {
    int grace = md.value("deletionGracePeriodSeconds",
                         pod["spec"].value("terminationGracePeriodSeconds", 30));
    w->RequestDelete(grace);
  }
}

void NodeAgent::OnPodDeleted(const json& pod) {
  const std::string uid = pod["metadata"].value("uid", "");
  std::shared_ptr<PodWorker> w;
  {
    MutexLock lock(mu_);
    auto it = workers_.find(uid);
    if (it == workers_.end()) return;
    w = it->second;
    workers_.erase(it);
  }
  w->MarkGone();
  w->RequestDelete(0);
  std::string ns = w->pod_namespace();
  // The last reference joins the worker's thread: do that off the informer's thread.
  std::thread([w = std::move(w)] {}).detach();
  RewriteHostsFiles(ns);
}

PodWorkerContext NodeAgent::WorkerContext() {
  return {client_, clock_, log_, &options_,
          [this](const std::string& ns) { RewriteHostsFiles(ns); }};
}

void NodeAgent::RewriteHostsFiles(const std::string& ns) {
  std::vector<std::shared_ptr<PodWorker>> same_ns;
  std::vector<HostEntry> entries;
  {
    MutexLock lock(mu_);
    for (const auto& [uid, w] : workers_) {
      if (w->pod_namespace() != ns) continue;
      same_ns.push_back(w);
      entries.push_back(w->Entry());
    }
  }
  std::error_code ec;
  for (const auto& w : same_ns) {
    fs::create_directories(fs::path(w->hosts_file()).parent_path(), ec);
    WriteFileInPlace(w->hosts_file(), HostsFile(w->pod_ip(), w->hostname(), entries));
  }
  // A pod worker's thread calls this too (PodWorkerContext): when its pod was deleted
  // meanwhile, `same_ns` may hold the last reference to it, whose destructor joins its
  // thread. Released off every worker's thread, as OnPodDeleted does.
  std::thread([workers = std::move(same_ns)] {}).detach();
}

void NodeAgent::ProvisionClaim(const json& pvc) {
  const json md = pvc.value("metadata", json::object());
  const json spec = pvc.value("spec", json::object());
  if (!spec.value("volumeName", "").empty() || kube::IsBeingDeleted(pvc)) return;
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
               // The label and the provisioner keep the names they had before tj-process-node
               // was renamed from tj-local-node: users may select volumes by them.
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
    MutexLock lock(mu_);
    workers.swap(workers_);
  }
  // Stop the processes, all at once; leave the pods to the server and their state to the
  // next agent.
  for (auto& [uid, w] : workers) w->StopForAgentShutdown(kShutdownGraceSeconds);
  workers.clear();
  StopLogServer();
  return Status::Ok();
}

}  // namespace tj::processnode
