// Load: kJobs TrainingJobs of kReplicas workers each, all at once, on a local cluster
// of its own. The cluster has no node (no tj-process-node), so the pods stay Pending: the test
// measures the control plane and the operator, not 800 trainers on a small machine.
//  1. The API server's own capacity: a direct client creates the very objects the operator
//     would (Service, Secret and pods from operator/controller/job_resources) for kJobs jobs
//     in a scratch namespace, kWorkers jobs at a time (the operator's workers), each job's
//     objects as the executor sends them (its Service and Secret together, then its pods in
//     slow-start batches), QPS limits off; before and after each operator run (the mean of
//     the two is that round's capacity), each namespace deleted and waited for, so every run
//     starts on the same cluster.
//  2. The operator, kRounds times: kJobs jobs exist in a namespace of their own before a
//     fresh tj-operator (default flags but --workers kWorkers) starts watching it.
// Both rates are objects per second from the start to the last object seen by a watch (the
// test's informers, the same in both runs). Then: every pod created exactly once (one ADDED,
// no DELETED, none missing or extra), every job's status right (Created, active replicas,
// no restart) and when the last one was (the operator's status writes give way to its
// creates: operator/controller/executor.h), the operator's peak RSS (VmHWM) and CPU seconds;
// one JSON line with the figures of every round. Passes with no duplicate, every status
// right, a peak RSS under 50 MiB and the median round's ratio at least kMinRatio (the
// issue's 80% is reported, see kTargetRatio). TJ_LOAD_JOBS and TJ_LOAD_ROUNDS override kJobs
// and kRounds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kube/informer.h"
#include "kube/object_meta.h"
#include "operator/api/training_job.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/slow_start.h"
#include "tests/integration/kube/local_cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::Eventually;
using testing::LocalCluster;
using Steady = std::chrono::steady_clock;

constexpr int kJobs = 200;  // the load the operator is sized for (docs/reliability.md)
constexpr int kReplicas = 4;
// Operator runs, each between two direct runs; the median round decides. One run alone
// varied from 0.54 to 1.08 of the direct rate on the same code (docs/reliability.md "Load").
constexpr int kRounds = 3;
constexpr int kWorkers = 16;  // the operator's --workers default; the direct client's threads
// The target is 80% of the direct rate; on a 2-core machine the operator's median
// round reached 0.82-0.85 of it in three test runs, single rounds 0.65-0.92
// (docs/reliability.md "Load", bench/operator_load: its start-up and its own CPU come out of
// the API server's two cores). The test reports against the target (target_met) and fails
// below kMinRatio, a regression floor low enough for the spread of a busy, shared CI
// machine, where a failure at 0.8 would be noise more often than news: the operator on
// cpprestsdk and glibc's malloc measured 0.52 (on a cold cluster, which flattered it),
// before informer caches 0.31.
constexpr double kTargetRatio = 0.8;
constexpr double kMinRatio = 0.4;
constexpr double kMaxPeakRssMiB = 50;
constexpr int kObjectsPerJob = kReplicas + 2;  // pods, the Service, the Secret
constexpr auto kCreateTimeout = std::chrono::minutes(4);

// A positive count from the environment variable `name`, else `fallback`.
int CountFromEnv(const char* name, int fallback) {
  const char* v = std::getenv(name);
  const int n = v == nullptr ? 0 : std::atoi(v);
  return n > 0 ? n : fallback;
}
int JobCount() { return CountFromEnv("TJ_LOAD_JOBS", kJobs); }
// Rounds of (operator, direct client).
int RoundCount() { return CountFromEnv("TJ_LOAD_ROUNDS", kRounds); }

std::string JobName(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "load-%03d", i);
  return buf;
}

json NewJob(const std::string& name) {
  json container = {{"name", "trainer"},
                    {"image", "ghcr.io/tjo-dev/tj-trainer:latest"},
                    {"args", {"--epochs", "1", "--threads", "1"}}};
  return {{"apiVersion", "tjo.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"replicaSpecs",
             {{"Worker",
               {{"replicas", kReplicas},
                {"restartPolicy", "ExitCode"},
                {"template", {{"spec", {{"containers", json::array({container})}}}}}}}}}}}};
}

// Creates the jobs (not timed); returns them as the API server answered (with their uids).
std::vector<json> CreateJobs(Client* c, const std::string& ns, int n) {
  std::vector<json> out(n);
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  threads.reserve(kWorkers);
  for (int t = 0; t < kWorkers; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < n; i = next++) {
        auto r = c->Create(api::kTrainingJobs, ns, NewJob(JobName(i)));
        EXPECT_TRUE(r.ok()) << r.status().message();
        if (r.ok()) out[i] = *r;
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Watches the pods, Services and Secrets of one namespace that carry tjo.dev/job-name:
// how often each was added and deleted, and when the last one arrived.
class ObjectWatch {
 public:
  ObjectWatch(Client* c, const std::string& ns) {
    for (const auto& r : {resources::kPods, resources::kServices, resources::kSecrets}) {
      InformerOptions o;
      o.resource = r;
      o.ns = ns;
      o.label_selector = api::kLabelJobName;
      o.transform = StripManagedFields;
      auto inf = std::make_unique<Informer>(c, RealClock::Get(), o);
      const std::string plural = r.plural;
      inf->AddHandlers({[this, plural](const json& obj) { Added(plural, obj); }, nullptr,
                        [this, plural](const json& obj) { Deleted(plural, obj); }});
      informers_.push_back(std::move(inf));
    }
    for (auto& inf : informers_) inf->Start();
    for (auto& inf : informers_) EXPECT_TRUE(inf->WaitForSync(std::chrono::seconds(30)));
  }
  ~ObjectWatch() {
    for (auto& inf : informers_) inf->Stop();
  }

  int added() const {
    std::lock_guard<std::mutex> lock(mu_);
    return added_total_;
  }
  // Waits until `n` objects were added; the time the last one arrived, or nullopt.
  std::optional<Steady::time_point> WaitForAdded(int n, std::chrono::milliseconds timeout) {
    if (!Eventually([&] { return added() >= n; }, timeout)) return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    return last_added_;
  }
  std::map<std::string, int> adds() const {
    std::lock_guard<std::mutex> lock(mu_);
    return adds_;
  }
  // Seconds from `t0` until `fraction` of the `n` objects had arrived.
  double SecondsUntil(double fraction, int n, Steady::time_point t0) const {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t i = std::min(add_times_.size(), static_cast<size_t>(std::lround(fraction * n)));
    if (i == 0) return 0;
    return std::chrono::duration<double>(add_times_[i - 1] - t0).count();
  }
  std::map<std::string, int> deletes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return deletes_;
  }

 private:
  void Added(const std::string& plural, const json& obj) {
    std::lock_guard<std::mutex> lock(mu_);
    ++adds_[KeyOf(plural, obj)];
    ++added_total_;
    last_added_ = Steady::now();
    add_times_.push_back(last_added_);
  }
  void Deleted(const std::string& plural, const json& obj) {
    std::lock_guard<std::mutex> lock(mu_);
    ++deletes_[KeyOf(plural, obj)];
  }

  // "<plural>/<name>"; a job's rendezvous Secret as "secrets/<job>-rendezvous" (its name carries
  // the job's UID, which ExpectedObjects does not know).
  static std::string KeyOf(const std::string& plural, const json& obj) {
    std::string name = api::RefOf(obj).name;
    const json owners = kube::MetadataOf(obj).value("ownerReferences", json::array());
    if (plural == "secrets" && !owners.empty() && owners[0].is_object()) {
      const api::ObjectRef job{
          .name = owners[0].value("name", ""), .ns = "", .uid = owners[0].value("uid", "")};
      if (controller::SecretName(job) == name) {
        name = controller::SecretName({.name = job.name, .ns = "", .uid = ""});
      }
    }
    return plural + "/" + name;
  }

  std::vector<std::unique_ptr<Informer>> informers_;
  mutable std::mutex mu_;
  std::map<std::string, int> adds_, deletes_;  // GUARDED_BY(mu_)
  int added_total_ = 0;                        // GUARDED_BY(mu_)
  Steady::time_point last_added_;              // GUARDED_BY(mu_)
  std::vector<Steady::time_point> add_times_;  // GUARDED_BY(mu_)
};

// When 1%, 10%, 25%, 50%, 75% and 90% of `n` objects had arrived (seconds after `t0`): where a
// run loses time (start-up, or throughput).
json Curve(const ObjectWatch& w, int n, Steady::time_point t0) {
  json out = json::array();
  for (double f : {0.01, 0.1, 0.25, 0.5, 0.75, 0.9}) {
    out.push_back(std::round(w.SecondsUntil(f, n, t0) * 1000) / 1000);
  }
  return out;
}

// What every job must have produced: "<plural>/<name>" of its Service, Secret and pods.
std::set<std::string> ExpectedObjects(int jobs) {
  std::set<std::string> out;
  for (int i = 0; i < jobs; ++i) {
    const std::string job = JobName(i);
    out.insert("services/" + job);
    out.insert("secrets/" + controller::SecretName({.name = job, .ns = "", .uid = ""}));
    for (int r = 0; r < kReplicas; ++r) {
      out.insert("pods/" + controller::PodName(job, api::ReplicaType::kWorker, r));
    }
  }
  return out;
}

// Exactly the expected objects, each added once and never deleted.
void ExpectEachCreatedOnce(const ObjectWatch& w, int jobs, const std::string& who) {
  const std::set<std::string> expected = ExpectedObjects(jobs);
  const auto adds = w.adds();
  int missing = 0, duplicated = 0, extra = 0;
  for (const auto& name : expected) {
    auto it = adds.find(name);
    if (it == adds.end()) {
      if (++missing <= 5) ADD_FAILURE() << who << ": " << name << " was never created";
    } else if (it->second != 1) {
      if (++duplicated <= 5)
        ADD_FAILURE() << who << ": " << name << " created " << it->second << " times";
    }
  }
  for (const auto& [name, n] : adds) {
    if (!expected.count(name) && ++extra <= 5) ADD_FAILURE() << who << ": unexpected " << name;
  }
  EXPECT_EQ(missing + duplicated + extra, 0) << who;
  for (const auto& [name, n] : w.deletes()) ADD_FAILURE() << who << ": " << name << " deleted";
}

struct ProcessUsage {
  double peak_rss_mib = 0;  // VmHWM
  double cpu_s = 0;         // utime + stime
};

ProcessUsage UsageOf(pid_t pid) {
  ProcessUsage u;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) u.peak_rss_mib = std::atof(line.c_str() + 6) / 1024;
  }
  const std::string all = ::tj::testing::ReadBytes("/proc/" + std::to_string(pid) + "/stat");
  // Fields after the command name (which may hold spaces): state is field 3, utime 14.
  std::istringstream rest(all.substr(all.rfind(')') + 2));
  std::vector<std::string> f;
  for (std::string x; rest >> x;) f.push_back(x);
  if (f.size() > 12) {
    const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    u.cpu_s = (std::atof(f[11].c_str()) + std::atof(f[12].c_str())) / tick;
  }
  return u;
}

// CPU seconds the API server and etcd have used so far (their pids as hack/local-cluster.sh
// recorded them): what a run cost the control plane.
double ControlPlaneCpuSeconds(const std::string& cluster_dir) {
  double sum = 0;
  for (const char* name : {"kube-apiserver", "etcd"}) {
    std::ifstream f(cluster_dir + "/pids/" + name);
    pid_t pid = 0;
    if (f >> pid && pid > 0) sum += UsageOf(pid).cpu_s;
  }
  return sum;
}

std::string UtcNow() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

class OperatorLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    // No node agent in this cluster: pods stay Pending (the test is about the control plane
    // and the operator). The variable only matters to hack/local-cluster.sh up.
    ::setenv("TJ_LOCAL_NODE_BIN", "/nonexistent/tj-process-node (the load test runs no node)", 1);
    TJ_REQUIRE_LOCAL_CLUSTER(cluster_);
    if (!std::filesystem::exists(std::string(TJ_BIN_DIR) + "/tj-operator")) {
      GTEST_SKIP() << "build tj-operator first (" << TJ_BIN_DIR << ")";
    }
    client_ = cluster_->NewClient();
    tj::testing::Subprocess kubectl(
        {"/usr/bin/kubectl", "--kubeconfig", cluster_->kubeconfig(), "apply", "-f",
         std::string(TJ_SOURCE_DIR) + "/manifests/crd/trainingjob.yaml"},
        {}, cluster_->dir() + "/load-kubectl");
    ASSERT_EQ(kubectl.Wait(std::chrono::seconds(60)), 0) << kubectl.Stderr();
    ASSERT_TRUE(Eventually([&] { return client_->List(api::kTrainingJobs, "default").ok(); },
                           std::chrono::seconds(30)));
  }

  struct DirectRun {
    double seconds = 0, p50_s = 0;
    json curve;  // seconds until 1%, 10%, 25%, 50%, 75%, 90% of the objects had arrived
    double control_plane_cpu_s = 0;  // of the API server and etcd, from start to last object
  };
  // Creates the objects of `jobs` jobs with a plain client, kWorkers jobs at a time, in a
  // namespace of their own that is deleted afterwards (waited for, so that the next run
  // starts on a cluster in the same state).
  DirectRun Direct(int jobs) {
    const int objects = jobs * kObjectsPerJob;
    const std::string ns = testing::NewNamespace(client_.get(), "load-direct");
    std::vector<json> direct_jobs = CreateJobs(client_.get(), ns, jobs);
    DirectRun run;
    {
      ObjectWatch watch(client_.get(), ns);
      const double cpu0 = ControlPlaneCpuSeconds(cluster_->dir());
      const auto t0 = Steady::now();
      std::atomic<int> next{0};
      std::vector<std::thread> threads;
      threads.reserve(kWorkers);
      for (int t = 0; t < kWorkers; ++t) {
        threads.emplace_back([&] {
          for (int i = next++; i < jobs; i = next++) {
            const json& job = direct_jobs[i];
            auto spec = api::ParseSpec(job.value("spec", json()));
            ASSERT_TRUE(spec.ok()) << spec.status().message();
            // As the executor sends them: the Service and the Secret together, then the pods
            // in slow-start batches (operator/controller/slow_start.h).
            auto create = [&](const Resource& res, json obj) -> std::function<Status()> {
              return [this, &ns, res, obj = std::move(obj)] {
                auto r = client_->Create(res, ns, obj);
                EXPECT_TRUE(r.ok()) << r.status().message();
                return r.status();
              };
            };
            std::vector<std::function<Status()>> first = {
                create(resources::kServices, controller::BuildService(job, *spec)),
                create(resources::kSecrets, controller::BuildSecret(job, "direct-client-key"))};
            std::vector<std::function<Status()>> pods;
            pods.reserve(kReplicas);
            for (int r = 0; r < kReplicas; ++r) {
              pods.push_back(
                  create(resources::kPods,
                         controller::BuildPod(job, *spec, api::ReplicaType::kWorker, r, 0)));
            }
            if (controller::RunSlowStart(first, 0).ok()) {
              (void)controller::RunSlowStart(pods, controller::kFirstPodBatch);
            }
          }
        });
      }
      for (auto& t : threads) t.join();
      auto t1 = watch.WaitForAdded(objects, kCreateTimeout);
      run.control_plane_cpu_s = ControlPlaneCpuSeconds(cluster_->dir()) - cpu0;
      EXPECT_TRUE(t1) << "the direct client's objects did not all show up in "
                      << kCreateTimeout.count() << " minutes: " << watch.added() << " of "
                      << objects;
      if (t1) run.seconds = std::chrono::duration<double>(*t1 - t0).count();
      run.p50_s = watch.SecondsUntil(0.5, objects, t0);
      run.curve = Curve(watch, objects, t0);
      ExpectEachCreatedOnce(watch, jobs, "direct client");
    }
    DeleteNamespace(ns);
    return run;
  }

  struct OperatorRun {
    double seconds = 0, p50_s = 0;
    json curve;
    double control_plane_cpu_s = 0;  // of the API server and etcd, from start to last object
    double statuses_s = 0;           // from start until every job's status was right
    bool statuses_right = false;
    double peak_rss_mib = 0, cpu_s = 0, cpu_s_until_created = 0;
  };
  // `jobs` TrainingJobs in a namespace of their own, then a fresh tj-operator (--workers
  // kWorkers) started on them: the time from its start to the last object, every pod,
  // Service and Secret created exactly once, every status right. The namespace is deleted
  // and waited for afterwards.
  OperatorRun Operator(int jobs) {
    const int objects = jobs * kObjectsPerJob;
    OperatorRun run;
    const std::string op_ns = testing::NewNamespace(client_.get(), "load-operator");
    CreateJobs(client_.get(), op_ns, jobs);
    {
      ObjectWatch watch(client_.get(), op_ns);
      const double cpu0 = ControlPlaneCpuSeconds(cluster_->dir());
      const auto t0 = Steady::now();
      tj::testing::Subprocess proc(
          {std::string(TJ_BIN_DIR) + "/tj-operator", "--kubeconfig", cluster_->kubeconfig(),
           "--namespace", op_ns, "--workers", std::to_string(kWorkers), "--metrics-bind-address",
           "0", "--health-probe-bind-address", "0"},
          {}, cluster_->dir() + "/" + op_ns);
      auto t1 = watch.WaitForAdded(objects, kCreateTimeout);
      const ProcessUsage at_created = UsageOf(proc.pid());
      run.control_plane_cpu_s = ControlPlaneCpuSeconds(cluster_->dir()) - cpu0;
      EXPECT_TRUE(t1) << "the operator did not create every object in " << kCreateTimeout.count()
                      << " minutes: " << watch.added() << " of " << objects
                      << "; operator log: " << proc.Stderr().substr(0, 4000)
                      << proc.Stdout().substr(0, 4000);
      if (!t1) return run;
      run.seconds = std::chrono::duration<double>(*t1 - t0).count();
      run.p50_s = watch.SecondsUntil(0.5, objects, t0);
      run.curve = Curve(watch, objects, t0);
      run.cpu_s_until_created = at_created.cpu_s;

      // Every job's status: Created, all replicas active (Pending), no restart, no failure.
      std::string wrong;
      run.statuses_right = Eventually(
          [&] {
            auto list = client_->List(api::kTrainingJobs, op_ns);
            if (!list.ok()) {
              wrong = list.status().message();
              return false;
            }
            int right = 0;
            for (const auto& j : (*list)["items"]) {
              auto s = api::TrainingJobStatus::FromJson(j.value("status", json::object()));
              auto w = s.replica_statuses.find("Worker");
              if (s.IsTrue(api::condition::kCreated) && !s.IsTrue(api::condition::kFailed) &&
                  s.restart_count == 0 && s.created_generation == 0 &&
                  w != s.replica_statuses.end() && w->second.active == kReplicas &&
                  w->second.succeeded == 0 && w->second.failed == 0) {
                ++right;
              } else {
                wrong = api::RefOf(j).name + " has status " + j.value("status", json()).dump();
              }
            }
            return right == jobs;
          },
          std::chrono::seconds(60));
      EXPECT_TRUE(run.statuses_right) << wrong;
      // Status writes give way to the creates (executor.h): when the last one was in.
      run.statuses_s = std::chrono::duration<double>(Steady::now() - t0).count();
      // Settled: another pass must not create or delete anything.
      std::this_thread::sleep_for(std::chrono::seconds(2));
      ExpectEachCreatedOnce(watch, jobs, "operator");
      const ProcessUsage at_end = UsageOf(proc.pid());
      run.peak_rss_mib = at_end.peak_rss_mib;
      run.cpu_s = at_end.cpu_s;
      EXPECT_TRUE(proc.running()) << "the operator exited: " << proc.Stderr().substr(0, 4000);
      proc.Signal(SIGTERM);
      EXPECT_EQ(proc.Wait(std::chrono::seconds(30)), 0) << proc.Stderr().substr(0, 4000);
    }
    DeleteNamespace(op_ns);
    return run;
  }

  // Deletes `ns` and waits (bounded) until the namespace controller has emptied it.
  void DeleteNamespace(const std::string& ns) {
    auto r = client_->Delete(resources::kNamespaces, "", ns);
    EXPECT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(Eventually(
        [&] {
          auto g = client_->Get(resources::kNamespaces, "", ns);
          return !g.ok() && IsNotFound(g.error());
        },
        kCreateTimeout))
        << "namespace " << ns << " was not deleted in " << kCreateTimeout.count() << " minutes";
  }

  LocalCluster* cluster_ = nullptr;
  std::unique_ptr<RestClient> client_;
};

TEST_F(OperatorLoad, CreatesAsFastAsTheApiServerAcceptsWithoutDuplicates) {
  const int jobs = JobCount();
  const int rounds = RoundCount();
  const int objects = jobs * kObjectsPerJob;

  // The direct client before and after each operator run: D O D O D ... Each round's ratio is
  // the operator's rate over the mean of the direct rates on either side of it (a change of
  // the machine's other load in between shows, and averages out); the verdict is the median
  // round. A warm-up first (a quarter of the jobs, not measured): the first burst on a freshly
  // started API server ran about a quarter slower than the later ones (its heap, caches and
  // etcd's file growing), which made the first direct run look slow and the ratio look better.
  Direct(std::max(1, jobs / 4));
  ASSERT_FALSE(HasFatalFailure());
  std::vector<DirectRun> direct = {Direct(jobs)};
  ASSERT_FALSE(HasFatalFailure());
  std::vector<OperatorRun> op;
  for (int r = 0; r < rounds; ++r) {
    op.push_back(Operator(jobs));
    ASSERT_FALSE(HasFatalFailure());
    direct.push_back(Direct(jobs));
    ASSERT_FALSE(HasFatalFailure());
  }

  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  json round_results = json::array();
  std::vector<double> ratios;
  double peak_rss_mib = 0;
  bool statuses_right = true;
  for (int r = 0; r < rounds; ++r) {
    const DirectRun& before = direct[r];
    const DirectRun& after = direct[r + 1];
    ASSERT_GT(before.seconds, 0);
    ASSERT_GT(after.seconds, 0);
    const double direct_rate = (objects / before.seconds + objects / after.seconds) / 2;
    const double operator_rate = objects / op[r].seconds;
    ratios.push_back(operator_rate / direct_rate);
    peak_rss_mib = std::max(peak_rss_mib, op[r].peak_rss_mib);
    statuses_right = statuses_right && op[r].statuses_right;
    round_results.push_back({{"direct_s_before", before.seconds},
                             {"direct_s_after", after.seconds},
                             {"direct_objects_per_s", direct_rate},
                             {"direct_curve_before", before.curve},
                             {"direct_curve_after", after.curve},
                             {"control_plane_cpu_s_direct_before", before.control_plane_cpu_s},
                             {"control_plane_cpu_s_direct_after", after.control_plane_cpu_s},
                             {"control_plane_cpu_s_operator", op[r].control_plane_cpu_s},
                             {"operator_s", op[r].seconds},
                             {"operator_p50_s", op[r].p50_s},
                             {"operator_curve", op[r].curve},
                             {"operator_statuses_s", op[r].statuses_s},
                             {"operator_objects_per_s", operator_rate},
                             {"operator_peak_rss_mib", op[r].peak_rss_mib},
                             {"operator_cpu_s_until_created", op[r].cpu_s_until_created},
                             {"operator_cpu_s", op[r].cpu_s},
                             {"ratio", ratios.back()}});
  }
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  const double ratio = sorted.size() % 2 == 1
                           ? sorted[sorted.size() / 2]
                           : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
  const json result = {{"event", "load_result"},
                       {"date", UtcNow()},
                       {"host", host},
                       {"cpus", std::thread::hardware_concurrency()},
                       {"jobs", jobs},
                       {"replicas", kReplicas},
                       {"objects", objects},
                       {"workers", kWorkers},
                       {"rounds", round_results},
                       {"ratios", ratios},
                       {"ratio", ratio},
                       {"target_ratio", kTargetRatio},
                       {"target_met", ratio >= kTargetRatio},
                       {"operator_peak_rss_mib", peak_rss_mib},
                       {"statuses_right", statuses_right}};
  std::cout << result.dump() << std::endl;
  if (const char* f = std::getenv("TJ_LOAD_RESULT_FILE"); f != nullptr && *f != '\0') {
    std::ofstream(f, std::ios::app) << result.dump() << "\n";
  }
  EXPECT_GE(ratio, kMinRatio) << "the median round's ratio; rounds: "
                              << ::testing::PrintToString(ratios);
  EXPECT_LT(peak_rss_mib, kMaxPeakRssMiB) << "the operator's peak RSS";
}

}  // namespace
}  // namespace tj::kube
