// Memory: the operator stays under the chart's memory limit (128Mi) whatever one TrainingJob
// is. On a local cluster of its own without a node (pods stay Pending):
//  1. The largest TrainingJob this API server and etcd accept, found by trying: a binary
//     search over the size of its Worker template (many small env entries and arguments, the
//     shape that costs a JSON tree the most), each create the API server refuses (its 3 MiB
//     body limit) or etcd does ("request is too large", --max-request-bytes 1.5 MiB)
//     narrowing it down to kSearchStep bytes; kStatusRoom is left for the job's status.
//     Worker replicas: the CRD's maximum (manifests/crd/trainingjob.yaml).
//  2. kForeignPods pods labelled tjo.dev/job-name with that job's name in another namespace,
//     and kForeignPodsBeside in the job's own, none owned by a TrainingJob, each with a few
//     thousand arguments.
//  3. A tj-operator watching every namespace (the chart's default), started after both, until
//     kSettle after it sent the job's first pod. Each of its passes decides on every one of
//     the CRD's maximum of workers and sends their pods. The API server takes seconds per pod
//     this large (tens on a loaded machine: some creates pass the client's 30 s timeout and
//     are retried); a ResourceQuota of kPodQuota pods bounds what etcd (in /dev/shm) holds.
// Passes when the operator's peak RSS (VmHWM) stays under kLimitMiB, it still runs, it sent
// pods of the job, and it touched no foreign pod. One JSON line with the figures.
//
// Many jobs: kManyJobs TrainingJobs of that largest size in one namespace (one tenant), kJobsBefore
// of them created before the operator starts (its first list loads them) and the rest while it
// runs (its watch brings them). A ResourceQuota of kManyJobsPodQuota pods refuses the rest of
// their pods, as a tenant's quota would: none runs, and every pass over them ends in a status
// write (PodCreateRefused). Passes when the peak RSS stays under kLimitMiB less kMarginMiB, the
// operator still runs, and every job got a status from it.
// TJ_MEM_WORKERS overrides the worker count and TJ_MEM_OPERATOR the tj-operator binary (to
// measure another build).
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "operator/api/training_job.h"
#include "operator/api/yaml_json.h"
#include "tests/e2e/support/e2e_support.h"
#include "tests/integration/kube/local_cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::Eventually;
using testing::LocalCluster;
using Steady = std::chrono::steady_clock;

constexpr double kLimitMiB = 128;  // helm/tj-operator/values.yaml resources.limits.memory
// Past this the run stops at once: main's code took several GiB here.
constexpr double kAbortMiB = 4 * kLimitMiB;
constexpr int kForeignPods = 300;
constexpr int kForeignPodsBeside = 20;
constexpr int kForeignArgs = 3000;
constexpr int kPodQuota = 8;
constexpr size_t kSearchStep = 16 * 1024;
constexpr size_t kStatusRoom = 8 * 1024;
// The run ends kSettle after the first pod of the job was sent, at the latest at kRunTimeout.
constexpr auto kSettle = std::chrono::seconds(30);
constexpr auto kRunTimeout = std::chrono::seconds(180);
constexpr char kJob[] = "big";
constexpr int kManyJobs = 7;
constexpr int kJobsBefore = 4;
constexpr int kManyJobsWorkers = 2;
constexpr int kManyJobsPodQuota = 2;
constexpr double kMarginMiB = 8;
// The many-jobs run ends once every job has a status, kSettle later, at the latest at kRunTimeout.
const Resource kResourceQuotas{"v1", "resourcequotas"};

int WorkersFromEnv(int fallback) {
  const char* v = std::getenv("TJ_MEM_WORKERS");
  const int n = v == nullptr ? 0 : std::atoi(v);
  return n > 0 ? n : fallback;
}

// The CRD's maximum of spec.replicaSpecs.Worker.replicas.
int CrdMaxWorkers() {
  auto crd = api::YamlToJson(
      YAML::LoadFile(std::string(TJ_SOURCE_DIR) + "/manifests/crd/trainingjob.yaml"));
  if (!crd.ok()) return 0;
  const json& spec = (*crd)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
                           ["spec"]["properties"]["replicaSpecs"]["properties"]["Worker"];
  return spec["properties"]["replicas"].value("maximum", 0);
}

// A TrainingJob whose Worker template holds about `pad` bytes of padding: half in env entries
// {"name":"PAD_n","value":"..."}, half in short arguments (what the operator's caches would
// keep of a pod's container).
json BigJob(const std::string& name, int workers, size_t pad) {
  json env = json::array();
  json args = json::array({"--epochs", "1"});
  size_t bytes = 0;
  for (int i = 0; bytes < pad / 2; ++i) {
    env.push_back({{"name", "PAD_" + std::to_string(i)}, {"value", "0123456789abcdef"}});
    bytes += 40 + std::to_string(i).size();
  }
  for (int i = 0; bytes < pad; ++i) {
    args.push_back("--x" + std::to_string(i % 1000));
    bytes += 10;
  }
  json container = {{"name", "trainer"}, {"image", "tj-trainer"}, {"args", args}, {"env", env}};
  return {{"apiVersion", "tjo.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"replicaSpecs",
             {{"Worker",
               {{"replicas", workers},
                {"restartPolicy", "ExitCode"},
                {"template", {{"spec", {{"containers", json::array({container})}}}}}}}}}}}};
}

// A pod that wears a job's label but no TrainingJob owns.
json ForeignPod(const std::string& name) {
  json args = json::array();
  for (int i = 0; i < kForeignArgs; ++i) args.push_back("--f" + std::to_string(i));
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"labels",
             {{api::kLabelJobName, kJob},
              {api::kLabelReplicaType, "worker"},
              {api::kLabelReplicaIndex, "0"}}}}},
          {"spec",
           {{"containers",
             json::array({{{"name", "trainer"}, {"image", "foreign"}, {"args", args}}})}}}};
}

// VmHWM of `pid` in MiB; 0 when it cannot be read.
double PeakRssMiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024;
  }
  return 0;
}

// User and system CPU seconds of `pid`.
double CpuSeconds(pid_t pid) {
  const std::string all = ::tj::testing::ReadBytes("/proc/" + std::to_string(pid) + "/stat");
  if (all.rfind(')') == std::string::npos) return 0;
  std::istringstream rest(all.substr(all.rfind(')') + 2));  // after the command name
  std::vector<std::string> f;
  for (std::string x; rest >> x;) f.push_back(x);
  if (f.size() <= 12) return 0;
  return (std::atof(f[11].c_str()) + std::atof(f[12].c_str())) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

// What a run of the operator came to.
struct OperatorRun {
  double peak = 0;  // VmHWM, MiB
  double cpu_s = 0;
  double seconds = 0;
  bool running = false;

  // The figures of the run's JSON line.
  json Figures() const {
    return {{"peak_rss_mib", std::round(peak * 10) / 10},
            {"operator_cpu_s", std::round(cpu_s * 10) / 10},
            {"limit_mib", kLimitMiB},
            {"seconds", std::round(seconds)}};
  }
};

// Follows `proc` from now until kSettle after `step` (called every 100 ms) first said it is
// done, until the peak passes kAbortMiB or the operator exits, at the latest kRunTimeout.
OperatorRun Follow(tj::testing::Subprocess& proc, const std::function<bool()>& step) {
  const auto t0 = Steady::now();
  OperatorRun run;
  std::optional<Steady::time_point> done;
  while (Steady::now() - t0 < kRunTimeout) {
    run.peak = std::max(run.peak, PeakRssMiB(proc.pid()));
    if (run.peak > kAbortMiB || proc.Wait(std::chrono::milliseconds(0))) break;
    if (!done && step()) done = Steady::now();
    if (done && Steady::now() - *done > kSettle) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  run.peak = std::max(run.peak, PeakRssMiB(proc.pid()));
  run.cpu_s = CpuSeconds(proc.pid());
  run.running = !proc.Wait(std::chrono::milliseconds(0)).has_value();
  run.seconds = std::chrono::duration<double>(Steady::now() - t0).count();
  return run;
}

class OperatorMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    // No node: the pods stay Pending (the variable only matters to hack/local-cluster.sh up).
    ::setenv("TJ_LOCAL_NODE_BIN", "/nonexistent/tj-process-node (the memory test runs no node)", 1);
    TJ_REQUIRE_LOCAL_CLUSTER(cluster_);
    const char* other = std::getenv("TJ_MEM_OPERATOR");
    operator_ = other != nullptr ? other : std::string(TJ_BIN_DIR) + "/tj-operator";
    if (!std::filesystem::exists(operator_)) GTEST_SKIP() << "build tj-operator first";
    client_ = cluster_->NewClient();
    const std::string out = testing::Kubectl(
        cluster_, "apply -f " + std::string(TJ_SOURCE_DIR) + "/manifests/crd/trainingjob.yaml");
    ASSERT_TRUE(Eventually([&] { return client_->List(api::kTrainingJobs, "default").ok(); },
                           std::chrono::seconds(20)))
        << out;
  }

  // The largest padding of BigJob that the API server stores, within kSearchStep; the error
  // of the smallest refused one in `refusal`.
  size_t LargestAcceptedPad(int workers, std::string* refusal) {
    // One search per process: the tests share the cluster, and the worker count changes the
    // job's size by a few bytes.
    static size_t found = 0;
    static std::string found_refusal;
    if (found == 0) found = SearchLargestAcceptedPad(workers, &found_refusal);
    *refusal = found_refusal;
    return found;
  }

  size_t SearchLargestAcceptedPad(int workers, std::string* refusal) {
    const std::string ns = testing::NewNamespace(client_.get(), "mem-probe");
    size_t lo = 256 * 1024, hi = 4 * 1024 * 1024;  // lo is accepted, hi refused
    while (hi - lo > kSearchStep) {
      const size_t mid = (lo + hi) / 2;
      auto r = client_->Create(api::kTrainingJobs, ns, BigJob("probe", workers, mid));
      if (r.ok()) {
        lo = mid;
        EXPECT_TRUE(client_->Delete(api::kTrainingJobs, ns, "probe").ok());
        EXPECT_TRUE(Eventually(
            [&] { return IsNotFound(client_->Get(api::kTrainingJobs, ns, "probe").error()); }));
      } else {
        hi = mid;
        *refusal = r.error().ToString();
      }
    }
    return lo;
  }

  // A ResourceQuota of `pods` pods in `ns`, once the controller manager has filled in its
  // status (pods are admitted against a quota only then).
  void PodQuota(const std::string& ns, int pods) {
    ASSERT_TRUE(client_
                    ->Create(kResourceQuotas, ns,
                             {{"apiVersion", "v1"},
                              {"kind", "ResourceQuota"},
                              {"metadata", {{"name", "pods"}}},
                              {"spec", {{"hard", {{"pods", std::to_string(pods)}}}}}})
                    .ok());
    ASSERT_TRUE(Eventually(
        [&] {
          auto q = client_->Get(kResourceQuotas, ns, "pods");
          return q.ok() && (*q)["status"].contains("hard");
        },
        std::chrono::seconds(60)))
        << "the ResourceQuota got no status";
  }

  LocalCluster* cluster_ = nullptr;
  std::string operator_;
  std::unique_ptr<RestClient> client_;
};

TEST_F(OperatorMemory, LargestJobAndForeignPodsStayUnderTheChartLimit) {
  const int max_workers = CrdMaxWorkers();
  ASSERT_GT(max_workers, 0) << "no maximum of Worker replicas in the CRD";
  const int workers = WorkersFromEnv(max_workers);

  std::string refusal;
  const size_t accepted_pad = LargestAcceptedPad(workers, &refusal);
  ASSERT_FALSE(refusal.empty()) << "the API server took a job of 4 MiB";
  const json job = BigJob(kJob, workers, accepted_pad - kStatusRoom);
  const size_t job_bytes = job.dump().size();

  const std::string ns = testing::NewNamespace(client_.get(), "mem-job");
  const std::string foreign_ns = testing::NewNamespace(client_.get(), "mem-foreign");
  PodQuota(ns, kPodQuota + kForeignPodsBeside);
  if (HasFatalFailure()) return;
  {
    std::atomic<int> next{0};
    std::vector<std::jthread> threads;
    threads.reserve(8);
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = next++; i < kForeignPods + kForeignPodsBeside; i = next++) {
          const bool beside = i >= kForeignPods;
          auto r = client_->Create(resources::kPods, beside ? ns : foreign_ns,
                                   ForeignPod("foreign-" + std::to_string(i)));
          EXPECT_TRUE(r.ok()) << r.status().message();
        }
      });
    }
  }
  auto created = client_->Create(api::kTrainingJobs, ns, job);
  ASSERT_TRUE(created.ok()) << created.status().message();

  tj::testing::Subprocess proc({operator_, "--kubeconfig", cluster_->kubeconfig(),
                                "--metrics-bind-address", "0", "--health-probe-bind-address", "0"},
                               {}, cluster_->dir() + "/operator-memory");
  // The quota charges a pod at admission, before etcd stores or refuses it: its count of used
  // pods past the foreign ones says the operator has sent pods of the job.
  std::optional<Steady::time_point> first_sent;
  auto next_look = Steady::now();
  const OperatorRun run = Follow(proc, [&] {
    if (Steady::now() < next_look) return false;
    next_look += std::chrono::seconds(1);
    auto q = client_->Get(kResourceQuotas, ns, "pods");
    const json used = q.ok() ? (*q)["status"]["used"].value("pods", json("0")) : json("0");
    if (used.is_string() && std::atoi(used.get<std::string>().c_str()) > kForeignPodsBeside) {
      first_sent = Steady::now();
    }
    return first_sent.has_value();
  });
  const double peak = run.peak;
  const bool running = run.running;
  // What became of the job's pods: stored, or refused (the Events of the refusals).
  ListOptions lo;
  lo.label_selector = std::string(api::kLabelJobName) + "=" + kJob;
  int pods = 0;
  if (auto list = client_->List(resources::kPods, ns, lo); list.ok()) {
    for (const auto& p : (*list)["items"]) pods += p["metadata"].contains("ownerReferences");
  }
  int refused = 0;
  std::string refusal_of_pods;
  ListOptions failed;
  failed.field_selector = "reason=CreateFailed";
  if (auto events = client_->List(resources::kEvents, ns, failed); events.ok()) {
    for (const auto& e : (*events)["items"]) {
      refused += e.value("count", 1);
      refusal_of_pods = e.value("message", "");
    }
  }

  auto foreign = client_->List(resources::kPods, foreign_ns, lo);
  ASSERT_TRUE(foreign.ok());
  json line{{"test", "operator_memory"},
            {"job_bytes", job_bytes},
            {"largest_accepted_pad", accepted_pad},
            {"refusal", refusal},
            {"workers", workers},
            {"pods_created", pods},
            {"pod_creates_refused", refused},
            {"pod_refusal", refusal_of_pods.substr(0, 300)},
            {"foreign_pods", kForeignPods + kForeignPodsBeside}};
  line.update(run.Figures());
  std::cout << line.dump() << "\n";
  EXPECT_TRUE(running) << "the operator exited; its log: " << proc.Stderr().substr(0, 4000);
  EXPECT_LT(peak, kLimitMiB) << "the operator's peak RSS (VmHWM) passed the chart's limit"
                             << (peak > kAbortMiB ? " (stopped there)" : "");
  if (peak <= kAbortMiB) {
    EXPECT_TRUE(first_sent) << "the operator sent no pod of the job in " << kRunTimeout.count()
                            << " s; its log: " << proc.Stdout().substr(0, 4000);
  }
  EXPECT_EQ((*foreign)["items"].size(), static_cast<size_t>(kForeignPods))
      << "the operator deleted foreign pods";
}

TEST_F(OperatorMemory, ManyLargestJobsStayUnderTheChartLimit) {
  std::string refusal;
  const size_t accepted_pad = LargestAcceptedPad(WorkersFromEnv(CrdMaxWorkers()), &refusal);
  ASSERT_FALSE(refusal.empty()) << "the API server took a job of 4 MiB";
  const size_t pad = accepted_pad - kStatusRoom;
  const std::string ns = testing::NewNamespace(client_.get(), "mem-tenant");
  PodQuota(ns, kManyJobsPodQuota);
  if (HasFatalFailure()) return;
  auto create = [&](int i) {
    auto r = client_->Create(api::kTrainingJobs, ns,
                             BigJob("big-" + std::to_string(i), kManyJobsWorkers, pad));
    EXPECT_TRUE(r.ok()) << "job " << i << ": " << r.status().message();
  };
  for (int i = 0; i < kJobsBefore; ++i) create(i);
  const size_t job_bytes = BigJob("big-0", kManyJobsWorkers, pad).dump().size();

  tj::testing::Subprocess proc({operator_, "--kubeconfig", cluster_->kubeconfig(),
                                "--metrics-bind-address", "0", "--health-probe-bind-address", "0"},
                               {}, cluster_->dir() + "/operator-memory-many");
  const auto t0 = Steady::now();
  int next_job = kJobsBefore;
  int with_status = 0;
  bool all_seen = false;
  auto next_look = t0;
  const OperatorRun run = Follow(proc, [&] {
    // The rest of the jobs once the operator has started on the first ones, one per round.
    if (next_job < kManyJobs) {
      if (Steady::now() - t0 > std::chrono::seconds(5)) create(next_job++);
      return false;
    }
    if (Steady::now() < next_look) return false;
    next_look = Steady::now() + std::chrono::seconds(2);
    // A list of the jobs as big as they are: read outside the operator, in this process.
    with_status = 0;
    if (auto list = client_->List(api::kTrainingJobs, ns); list.ok()) {
      for (const auto& j : (*list)["items"]) {
        with_status += j.contains("status") && j["status"].contains("conditions");
      }
    }
    all_seen = with_status == kManyJobs;
    return all_seen;
  });
  const double peak = run.peak;
  const bool running = run.running;
  json line{{"test", "operator_memory_many_jobs"}, {"jobs", kManyJobs},
            {"jobs_before_start", kJobsBefore},    {"job_bytes", job_bytes},
            {"workers", kManyJobsWorkers},         {"jobs_with_status", with_status}};
  line.update(run.Figures());
  std::cout << line.dump() << "\n";
  EXPECT_TRUE(running) << "the operator exited; its log: " << proc.Stderr().substr(0, 4000);
  EXPECT_LT(peak, kLimitMiB - kMarginMiB)
      << "the operator's peak RSS (VmHWM) with " << kManyJobs << " jobs of " << job_bytes
      << " bytes came within " << kMarginMiB << " MiB of the chart's limit"
      << (peak > kAbortMiB ? " (stopped there)" : "");
  if (peak <= kAbortMiB && running) {
    EXPECT_TRUE(all_seen) << with_status << " of " << kManyJobs << " jobs got a status in "
                          << kRunTimeout.count()
                          << " s; the operator's log: " << proc.Stdout().substr(0, 4000);
  }
}

}  // namespace
}  // namespace tj::kube
