// Shared fixture of the end-to-end tests (tests/e2e/operator, tests/e2e/fault, ...): the local
// cluster (hack/local-cluster.sh; its real node under ctest, so pods are containers of our
// images, or with TJ_NODE=process tj-process-node, so pods are tj-trainer processes),
// the example TrainingJob scaled down, a tj-operator process per test, and what a test reads
// back: the job, its pods, pod logs, the final weights digest, the trainer processes of a pod.
// Each test gets its own namespace and its own operator (--namespace).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "operator/api/training_job.h"
#include "operator/api/yaml_json.h"
#include "tests/integration/kube/local_cluster.h"
#include "tests/support/subprocess.h"

namespace tj::kube::testing {

// Runs `cmd` under /bin/sh with stderr folded into stdout; returns the output. A command still
// running after `timeout` is killed (its output so far is returned, with a note).
std::string Sh(const std::string& cmd, std::chrono::seconds timeout = std::chrono::seconds(60));

// Whether this test's cluster runs a real node (TJ_TEST_NODE=containerd: pods are containers
// of images from `make images`) rather than the process node.
bool RealNode();

// The random moments of a kill test: seeded from $`seed_env` when it is set (to replay a run),
// else at random; the seed is printed either way.
std::mt19937 SeededRandom(const char* seed_env);
// A uniform integer of [lo, hi].
int Uniform(std::mt19937& rng, int lo, int hi);
// localhost/<name>:<the project's version>, as hack/images.sh tags its images.
std::string LocalImage(const std::string& name);

// Where a real node's kubelet writes the containers' output (CRI format; fixed in 1.20).
inline constexpr const char* kKubeletPodLogDir = "/var/log/pods";

// The output of pod `ns`/`pod` (uid `uid`) on a real node, from the kubelet's files: the
// container named "trainer", else the pod's only one; every run of it, oldest first, with
// the CRI prefix (time, stream, tag) removed. Empty when there is none.
std::string CriPodLog(const std::string& ns, const std::string& pod, const std::string& uid);

// kubectl against `cluster`.
std::string Kubectl(const LocalCluster* cluster, const std::string& args);

// A YAML document as JSON, typed as Kubernetes reads manifests (operator/api/yaml_json.h).
using ::tj::api::YamlToJson;

// The documents of manifests/examples/fmnist.yaml: {PersistentVolumeClaim, TrainingJob}.
std::vector<nlohmann::json> ExampleDocs();

// Replaces or adds "--flag value" in a container's args.
void SetArg(nlohmann::json& args, const std::string& flag, const std::string& value);

// The example, scaled down: `epochs` epochs of `steps` steps; backups every `save_freq` steps;
// no TTL (tests read the finished job).
nlohmann::json ScaledExample(int epochs, int steps, int save_freq);

// The job of the fault tests: the example scaled to kFaultEpochs epochs of kFaultSteps steps,
// a backup every kFaultSaveFreq steps; its Worker pods get TJ_FAILPOINTS=`failpoints`
// (common/failpoint.h) unless empty.
inline constexpr int kFaultEpochs = 3;
inline constexpr int kFaultSteps = 20;
inline constexpr int kFaultSaveFreq = 5;
nlohmann::json FaultJob(const std::string& failpoints);
// Failpoints that hold every backup write `ms` milliseconds before its rename. The chief waits
// for the previous write before the next one, so training then lasts at least
// kFaultEpochs * kFaultSteps / kFaultSaveFreq * ms: a window in which a fault lands mid-run.
std::string PaceFailpoint(int ms);

// Adds or replaces an environment variable of every container of a replica type's template.
void SetEnv(nlohmann::json& job, const std::string& replica_type, const std::string& name,
            const std::string& value);

api::TrainingJobStatus StatusOf(const nlohmann::json& job);

// tj-operator watching one namespace, with short poll/backoff settings; output to
// `<log_path>.out` / `.err`. Stopped (SIGTERM, then SIGKILL after 20 s) when destroyed.
class OperatorProcess {
 public:
  // `keep_previous_log`: Log() also returns what an earlier operator wrote to `log_path`
  // (for a test that restarts the operator). `extra`: more flags; with --metrics-bind-address
  // it must also give --health-probe-bind-address.
  OperatorProcess(const LocalCluster* cluster, const std::string& ns, const std::string& log_path,
                  bool keep_previous_log = false, std::vector<std::string> extra = {});
  ~OperatorProcess() { Stop(SIGTERM); }
  OperatorProcess(const OperatorProcess&) = delete;
  OperatorProcess& operator=(const OperatorProcess&) = delete;

  // Sends `sig` and waits for the exit (SIGKILL after 20 s).
  void Stop(int sig);
  std::string Log() const;
  pid_t pid() const { return process_ ? process_->pid() : -1; }

 private:
  std::string previous_log_;
  std::unique_ptr<::tj::testing::Subprocess> process_;
};

// The trainer processes of a namespace as the node agent runs them: processes whose executable's
// name starts with `program` (tj-trainer by default) and whose TF_CONFIG names hosts in
// `<ns>.svc`; with `hostname`, only those of that pod (HOSTNAME); with `gang` >= 0 (a gang number),
// only those of that gang (TJ_RESTART_COUNT).
std::vector<pid_t> TrainerPids(const std::string& ns, const std::string& hostname = "",
                               int gang = -1, const std::string& program = "tj-trainer");

// The base of the end-to-end tests: SetUp applies the CRD, creates a namespace named after the
// test with the example's claim, and starts an operator for it; TearDown prints the operator
// log and the objects when the test failed.
class JobTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  nlohmann::json Get(const std::string& name);
  // Waits for the job's Succeeded or Failed condition; returns the job as it was then.
  nlohmann::json WaitFinished(const std::string& name, std::chrono::seconds timeout);
  std::vector<nlohmann::json> Pods(const std::string& job);
  // The log of a pod's container named "trainer", else of its first container found (restarts
  // of the container append to it; a re-created pod starts a fresh one): the process node's
  // file, or on a real node the kubelet's (CriPodLog).
  std::string PodLog(const std::string& pod);
  // The trainer's JSON events in a pod's log, in order; only those of `kind` when given.
  std::vector<nlohmann::json> PodEvents(const std::string& pod, const std::string& kind = "");
  // The messages of this namespace's Events of `reason`.
  std::vector<std::string> EventMessages(const std::string& reason);
  // Waits until the pod's log contains `needle`.
  bool WaitForPodLog(const std::string& pod, const std::string& needle,
                     std::chrono::seconds timeout);
  // Sends `sig` to the tj-trainer process of a pod of this namespace (not a pod deletion: the
  // process dies as it would of a crash or the OOM killer). Returns its pid, or 0 (with a test
  // failure) when there is not exactly one such process.
  pid_t SignalTrainer(const std::string& pod, int sig = SIGKILL);
  // The last `train_end` line's weights_sha256 in the chief's log (the Chief pod, else worker
  // 0); empty when there is none.
  std::string FinalWeightsSha(const nlohmann::json& job);
  // The final weights digest of `job` run without faults, as job "reference" in this test's
  // namespace on a claim of its own (its backups and checkpoints must not meet the test's
  // job). Cached per binary by the job's spec, so only the first test that asks pays for the
  // run. Empty, with a test failure, when it does not succeed at once with a digest. Claims
  // named in `shared_claims` (a dataset's, read by both jobs) are left as they are.
  std::string ReferenceSha(const nlohmann::json& job, std::chrono::seconds timeout,
                           const std::vector<std::string>& shared_claims = {});
  // Waits up to `timeout` for job `name` to finish, then expects it Succeeded after `restarts`
  // gang restarts, with a final weights digest (FinalWeightsSha) equal to `reference` (from
  // ReferenceSha); the log of `chief` is printed when it has none. With
  // `expect_no_trainer_left`, also expects no tj-trainer process of this namespace to be left
  // within 60 s (nothing of the job outlives it).
  void ExpectSucceededWithReferenceWeights(const std::string& name, const std::string& chief,
                                           const std::string& reference, int restarts,
                                           std::chrono::seconds timeout,
                                           bool expect_no_trainer_left = false);
  // Expects `job` Failed with reason NonRetryableExitCode naming exit `code`, without a restart.
  void ExpectFailedWithExitCode(const nlohmann::json& job, int code);
  // The first backup_saved event in the log of `chief` (waits for it; null at the timeout,
  // with a test failure).
  nlohmann::json FirstBackup(const std::string& chief, std::chrono::seconds timeout);
  // Waits until the tj-trainer of `chief` for gang `n` (TJ_RESTART_COUNT) runs and has
  // restored a backup; returns that `restored` event (null at the timeout, with a failure).
  nlohmann::json WaitResumed(const std::string& chief, int n, std::chrono::seconds timeout);

  LocalCluster* cluster_ = nullptr;
  std::unique_ptr<RestClient> client_;
  std::string ns_, log_path_;
  std::unique_ptr<OperatorProcess> op_;
};

}  // namespace tj::kube::testing
