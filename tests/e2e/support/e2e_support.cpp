#include "tests/e2e/support/e2e_support.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "tests/support/temp_dir.h"

namespace tj::kube::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using ::tj::testing::ReadBytes;

// The NUL-separated entries of /proc/<pid>/environ.
std::vector<std::string> EnvironOf(pid_t pid) {
  std::vector<std::string> out;
  std::istringstream in(ReadBytes("/proc/" + std::to_string(pid) + "/environ"));
  for (std::string e; std::getline(in, e, '\0');) out.push_back(e);
  return out;
}

}  // namespace

bool RealNode() { return TestNode() == "containerd"; }

std::string LocalImage(const std::string& name) {
  return "localhost/" + name + ":" + std::string(TJ_PROJECT_VERSION);
}

std::mt19937 SeededRandom(const char* seed_env) {
  const char* env = std::getenv(seed_env);
  const unsigned seed = env != nullptr ? static_cast<unsigned>(std::strtoul(env, nullptr, 10))
                                       : std::random_device{}();
  std::cerr << seed_env << "=" << seed << "\n";
  return std::mt19937(seed);
}

int Uniform(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

std::string CriPodLog(const std::string& ns, const std::string& pod, const std::string& uid) {
  const fs::path pod_dir = fs::path(kKubeletPodLogDir) / (ns + "_" + pod + "_" + uid);
  std::error_code ec;
  fs::path container_dir = pod_dir / "trainer";
  if (!fs::is_directory(container_dir, ec)) {
    container_dir.clear();
    for (fs::directory_iterator it(pod_dir, ec), end; !ec && it != end; it.increment(ec)) {
      container_dir = it->path();  // a user's container of another name: the pod's one
      break;
    }
    if (container_dir.empty()) return "";
  }
  // <restart>.log, one per run of the container, oldest first.
  std::vector<std::pair<int, fs::path>> files;
  for (fs::directory_iterator it(container_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string stem = it->path().stem().string();
    if (it->path().extension() == ".log" && !stem.empty() &&
        stem.find_first_not_of("0123456789") == std::string::npos) {
      files.emplace_back(std::stoi(stem), it->path());
    }
  }
  std::sort(files.begin(), files.end());
  // Lines "<time> <stream> <P|F> <text>": P is a part of a line continued by the next.
  std::string out;
  for (const auto& [n, file] : files) {
    std::istringstream in(ReadBytes(file.string()));
    for (std::string line; std::getline(in, line);) {
      const size_t a = line.find(' ');
      const size_t b = a == std::string::npos ? a : line.find(' ', a + 1);
      const size_t c = b == std::string::npos ? b : line.find(' ', b + 1);
      if (c == std::string::npos) continue;
      out += line.substr(c + 1);
      if (line.compare(b + 1, 1, "P") != 0) out += '\n';
    }
  }
  return out;
}

std::string Sh(const std::string& cmd, std::chrono::seconds timeout) {
  const ::tj::testing::TempDir dir("tj-e2e-sh");  // removed after the command, with its output
  std::string out;
  {
    ::tj::testing::Subprocess p({"/bin/sh", "-c", cmd + " 2>&1"}, {}, dir.Join("sh"));
    if (!p.Wait(timeout)) {
      out =
          "[killed: `" + cmd + "` still running after " + std::to_string(timeout.count()) + " s]\n";
    }
    out = p.Stdout() + p.Stderr() + out;
  }  // the destructor kills and reaps a command that is still running
  return out;
}

std::string Kubectl(const LocalCluster* cluster, const std::string& args) {
  return Sh("kubectl --kubeconfig " + cluster->kubeconfig() + " " + args);
}

std::vector<json> ExampleDocs() {
  std::vector<json> out;
  for (const auto& d :
       YAML::LoadAllFromFile(std::string(TJ_SOURCE_DIR) + "/manifests/examples/fmnist.yaml")) {
    auto j = YamlToJson(d);
    if (!j.ok())
      throw std::runtime_error("manifests/examples/fmnist.yaml: " + j.status().message());
    out.push_back(std::move(*j));
  }
  return out;
}

void SetArg(json& args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) {
      args[i + 1] = value;
      return;
    }
  }
  args.push_back(flag);
  args.push_back(value);
}

json ScaledExample(int epochs, int steps, int save_freq) {
  json job = ExampleDocs().at(1);
  for (const char* t : {"Worker", "Evaluator"}) {
    json& c = job["spec"]["replicaSpecs"][t]["template"]["spec"]["containers"][0];
    SetArg(c["args"], "--epochs", std::to_string(epochs));
    SetArg(c["args"], "--steps-per-epoch", std::to_string(steps));
    if (std::string(t) == "Worker") SetArg(c["args"], "--save-freq", std::to_string(save_freq));
    SetArg(c["args"], "--eval-poll-interval", "0.2");
    // Scaled down in CPU too: on a real node the scheduler counts requests, and a test may run
    // a reference job beside its own on a 2-core machine.
    c["resources"]["requests"]["cpu"] = "100m";
  }
  job["spec"]["runPolicy"].erase("ttlSecondsAfterFinished");
  return job;
}

json FaultJob(const std::string& failpoints) {
  json job = ScaledExample(kFaultEpochs, kFaultSteps, kFaultSaveFreq);
  if (!failpoints.empty()) SetEnv(job, "Worker", "TJ_FAILPOINTS", failpoints);
  return job;
}

std::string PaceFailpoint(int ms) { return "backup.before_rename=sleep:" + std::to_string(ms); }

void SetEnv(json& job, const std::string& replica_type, const std::string& name,
            const std::string& value) {
  for (json& c : job["spec"]["replicaSpecs"][replica_type]["template"]["spec"]["containers"]) {
    json& env = c["env"];
    if (!env.is_array()) env = json::array();
    bool replaced = false;
    for (json& e : env) {
      if (e.value("name", "") == name) {
        e["value"] = value;
        replaced = true;
      }
    }
    if (!replaced) env.push_back({{"name", name}, {"value", value}});
  }
}

api::TrainingJobStatus StatusOf(const json& job) {
  return api::TrainingJobStatus::FromJson(job.value("status", json::object()));
}

OperatorProcess::OperatorProcess(const LocalCluster* c, const std::string& ns,
                                 const std::string& log_path, bool keep_previous_log,
                                 std::vector<std::string> extra) {
  if (keep_previous_log)
    previous_log_ = ReadBytes(log_path + ".out") + ReadBytes(log_path + ".err");
  std::vector<std::string> args = {std::string(TJ_BIN_DIR) + "/tj-operator",
                                   "--kubeconfig",
                                   c->kubeconfig(),
                                   "--namespace",
                                   ns,
                                   "--workers",
                                   "2",
                                   "--progress-poll-seconds",
                                   "1",
                                   "--restart-backoff-ms",
                                   "500",
                                   "--failure-settle-seconds",
                                   "10",
                                   "--evaluator-grace-seconds",
                                   "120"};
  bool metrics = false, in_place = false;
  for (const auto& e : extra) {
    metrics = metrics || e == "--metrics-bind-address";
    in_place = in_place || e.starts_with("--restart-in-place");
  }
  // The tests count gangs by their pods made again: never, unless a test asks. (The default,
  // auto, would restart them in place on the real node, whose kubelet declares the feature;
  // on the process node, which declares nothing, it makes them again all the same.)
  if (!in_place) args.push_back("--restart-in-place=never");
  if (!metrics) {
    for (const char* a : {"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}) {
      args.push_back(a);
    }
  }
  args.insert(args.end(), extra.begin(), extra.end());
  process_ = std::make_unique<::tj::testing::Subprocess>(args, std::map<std::string, std::string>{},
                                                         log_path);
}

void OperatorProcess::Stop(int sig) {
  if (!process_ || !process_->running()) return;
  process_->Signal(sig);
  if (!process_->Wait(std::chrono::seconds(20))) {
    std::cerr << "tj-operator did not exit within 20 s of signal " << sig << "; killing it\n";
    process_->Signal(SIGKILL);
    process_->Wait(std::chrono::seconds(20));
  }
}

std::string OperatorProcess::Log() const {
  return previous_log_ + process_->Stdout() + process_->Stderr();
}

std::vector<pid_t> TrainerPids(const std::string& ns, const std::string& hostname, int gang,
                               const std::string& program) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::error_code link_ec;
    const fs::path exe = fs::read_symlink(it->path() / "exe", link_ec);
    if (link_ec || exe.filename().string().rfind(program, 0) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    bool in_ns = false, on_host = hostname.empty(), of_gang = gang < 0;
    for (const std::string& e : EnvironOf(pid)) {
      if (e.rfind("TF_CONFIG=", 0) == 0 && e.find("." + ns + ".svc") != std::string::npos) {
        in_ns = true;
      }
      if (!hostname.empty() && e == "HOSTNAME=" + hostname) on_host = true;
      if (gang >= 0 && e == "TJ_RESTART_COUNT=" + std::to_string(gang)) {
        of_gang = true;
      }
    }
    if (in_ns && on_host && of_gang) out.push_back(pid);
  }
  return out;
}

void JobTest::SetUp() {
  TJ_REQUIRE_LOCAL_CLUSTER(cluster_);
  if (!fs::exists(std::string(TJ_BIN_DIR) + "/tj-operator") ||
      !fs::exists(std::string(TJ_BIN_DIR) + "/tj-trainer")) {
    GTEST_SKIP() << "build tj-operator and tj-trainer first (" << TJ_BIN_DIR << ")";
  }
  client_ = cluster_->NewClient();
  const std::string out = Kubectl(
      cluster_, "apply -f " + std::string(TJ_SOURCE_DIR) + "/manifests/crd/trainingjob.yaml");
  ASSERT_TRUE(Eventually([&] { return client_->List(api::kTrainingJobs, "default").ok(); },
                         std::chrono::seconds(20)))
      << out;
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::string prefix;
  for (char ch : name) prefix += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  ns_ = NewNamespace(client_.get(), prefix.substr(0, 20));
  json pvc = ExampleDocs().at(0);
  ASSERT_TRUE(client_->Create(resources::kPersistentVolumeClaims, ns_, pvc).ok());
  log_path_ = cluster_->dir() + "/operator-" + ns_ + ".log";
  op_ = std::make_unique<OperatorProcess>(cluster_, ns_, log_path_);
}

void JobTest::TearDown() {
  if (HasFailure() && op_) {
    std::cerr << "--- operator log ---\n" << op_->Log().substr(0, 20000) << "\n";
    std::cerr << Kubectl(cluster_, "-n " + ns_ + " get tj,pods -o wide") << "\n"
              << Kubectl(cluster_, "-n " + ns_ + " get tj -o yaml") << "\n";
  }
  op_.reset();
}

json JobTest::Get(const std::string& name) {
  auto j = client_->Get(api::kTrainingJobs, ns_, name);
  return j.ok() ? *j : json();
}

json JobTest::WaitFinished(const std::string& name, std::chrono::seconds timeout) {
  json job;
  Eventually(
      [&] {
        job = Get(name);
        return StatusOf(job).Finished();
      },
      timeout);
  return job;
}

std::vector<json> JobTest::Pods(const std::string& job) {
  ListOptions lo;
  lo.label_selector = std::string(api::kLabelJobName) + "=" + job;
  auto l = client_->List(resources::kPods, ns_, lo);
  std::vector<json> out;
  if (l.ok()) {
    for (const auto& p : (*l)["items"]) out.push_back(p);
  }
  return out;
}

std::vector<std::string> JobTest::EventMessages(const std::string& reason) {
  std::vector<std::string> out;
  auto events = client_->List(resources::kEvents, ns_);
  if (!events.ok()) return out;
  for (const json& e : (*events)["items"]) {
    if (e.value("reason", "") == reason) out.push_back(e.value("message", ""));
  }
  return out;
}

std::string JobTest::PodLog(const std::string& pod) {
  const std::string dir = cluster_->dir() + "/logs/pods/";
  const std::string prefix = ns_ + "_" + pod + "_";
  if (fs::exists(dir + prefix + "trainer.log")) return ReadBytes(dir + prefix + "trainer.log");
  // A user's container of another name ("tensorflow"): the pod's one log.
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(prefix, 0) == 0) return ReadBytes(it->path());
  }
  // A real node: the kubelet's files of the pod as it is now (its uid).
  auto got = client_->Get(resources::kPods, ns_, pod);
  if (!got.ok()) return "";
  return CriPodLog(ns_, pod, (*got)["metadata"].value("uid", ""));
}

std::vector<json> JobTest::PodEvents(const std::string& pod, const std::string& kind) {
  std::vector<json> out;
  std::istringstream log(PodLog(pod));
  for (std::string line; std::getline(log, line);) {
    if (line.empty() || line[0] != '{') continue;  // stderr lines (warnings, failpoints)
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && (kind.empty() || j.value("event", "") == kind)) out.push_back(j);
  }
  return out;
}

bool JobTest::WaitForPodLog(const std::string& pod, const std::string& needle,
                            std::chrono::seconds timeout) {
  return Eventually([&] { return PodLog(pod).find(needle) != std::string::npos; }, timeout);
}

pid_t JobTest::SignalTrainer(const std::string& pod, int sig) {
  const std::vector<pid_t> pids = TrainerPids(ns_, pod);
  if (pids.size() != 1) {
    ADD_FAILURE() << "expected one tj-trainer process of pod " << ns_ << "/" << pod << ", found "
                  << pids.size();
    return 0;
  }
  if (::kill(pids[0], sig) != 0) {
    ADD_FAILURE() << "kill(" << pids[0] << ", " << sig << ") of pod " << pod << " failed";
    return 0;
  }
  return pids[0];
}

std::string JobTest::FinalWeightsSha(const json& job) {
  const std::string name = job["metadata"].value("name", "");
  const bool has_chief = job["spec"]["replicaSpecs"].contains("Chief");
  const auto ends = PodEvents(name + (has_chief ? "-chief-0" : "-worker-0"), "train_end");
  return ends.empty() ? "" : ends.back().value("weights_sha256", "");
}

std::string JobTest::ReferenceSha(const json& job, std::chrono::seconds timeout,
                                  const std::vector<std::string>& shared_claims) {
  static std::map<std::string, std::string> cache;  // spec -> digest; tests run one at a time
  const std::string key = job.value("spec", json()).dump();
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  json pvc = ExampleDocs().at(0);
  pvc["metadata"]["name"] = "reference-data";
  EXPECT_TRUE(client_->Create(resources::kPersistentVolumeClaims, ns_, pvc).ok());
  json reference = job;
  reference["metadata"] = {{"name", "reference"}};
  for (auto& [type, replica] : reference["spec"]["replicaSpecs"].items()) {
    for (json& v : replica["template"]["spec"]["volumes"]) {
      if (v.contains("persistentVolumeClaim") &&
          std::find(shared_claims.begin(), shared_claims.end(),
                    v["persistentVolumeClaim"].value("claimName", "")) == shared_claims.end()) {
        v["persistentVolumeClaim"]["claimName"] = "reference-data";
      }
    }
  }
  auto created = client_->Create(api::kTrainingJobs, ns_, reference);
  EXPECT_TRUE(created.ok()) << created.status().message();
  reference = WaitFinished("reference", timeout);
  const auto s = StatusOf(reference);
  std::string sha = FinalWeightsSha(reference);
  if (!s.IsTrue("Succeeded") || s.restart_count != 0 || sha.size() != 64) {
    ADD_FAILURE() << "the reference run did not succeed at once with a weights digest: "
                  << reference.dump(2) << "\n"
                  << PodLog("reference-worker-0");
    return "";
  }
  cache[key] = sha;
  return sha;
}

void JobTest::ExpectSucceededWithReferenceWeights(const std::string& name, const std::string& chief,
                                                  const std::string& reference, int restarts,
                                                  std::chrono::seconds timeout,
                                                  bool expect_no_trainer_left) {
  const json job = WaitFinished(name, timeout);
  const auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Succeeded")) << job.dump(2);
  EXPECT_EQ(s.restart_count, restarts) << job.dump(2);
  const std::string got = FinalWeightsSha(job);
  EXPECT_EQ(got.size(), 64u) << PodLog(chief);
  EXPECT_EQ(got, reference) << "the final weights differ from those of the uninterrupted run";
  if (expect_no_trainer_left) {
    EXPECT_TRUE(Eventually([&] { return TrainerPids(ns_).empty(); }, std::chrono::seconds(60)))
        << TrainerPids(ns_).size() << " tj-trainer processes of " << ns_ << " still run";
  }
}

void JobTest::ExpectFailedWithExitCode(const json& job, int code) {
  const auto s = StatusOf(job);
  ASSERT_TRUE(s.IsTrue("Failed")) << job.dump(2);
  EXPECT_EQ(s.Find("Failed")->reason, "NonRetryableExitCode") << job.dump(2);
  EXPECT_NE(s.Find("Failed")->message.find("exited with code " + std::to_string(code)),
            std::string::npos)
      << s.Find("Failed")->message;
  EXPECT_EQ(s.restart_count, 0);
}

json JobTest::FirstBackup(const std::string& chief, std::chrono::seconds timeout) {
  json first;
  EXPECT_TRUE(Eventually(
      [&] {
        auto saved = PodEvents(chief, "backup_saved");
        if (saved.empty()) return false;
        first = saved.front();
        return true;
      },
      timeout))
      << "no backup_saved from " << chief << ":\n"
      << PodLog(chief);
  return first;
}

// A re-created pod's log starts fresh before its process starts, so once the process of gang
// `n` runs, a `restored` line in the log is its own.
json JobTest::WaitResumed(const std::string& chief, int n, std::chrono::seconds timeout) {
  json restored;
  EXPECT_TRUE(Eventually(
      [&] {
        if (TrainerPids(ns_, chief, n).size() != 1) return false;
        auto r = PodEvents(chief, "restored");
        if (r.empty()) return false;
        restored = r.back();
        return true;
      },
      timeout))
      << "gang " << n << " did not resume:\n"
      << PodLog(chief);
  return restored;
}

}  // namespace tj::kube::testing
