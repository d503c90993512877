#include "trainer/train/run.h"

#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "trainer/cluster/tf_config.h"
#include "trainer/collective/gloo_communicator.h"
#include "trainer/train/evaluator.h"
#include "trainer/train/observability.h"
#include "trainer/train/training_loop.h"

namespace tj::train {
namespace {

// The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota
// (cpu.max, e.g. a pod's CPU limit), so that a pod limited to 2 CPUs on a 64-core node runs
// 2 threads, not 64.
int UsableCores() {
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
  std::ifstream cpu_max("/sys/fs/cgroup/cpu.max");
  std::string quota;
  long long period = 0;
  if (cpu_max >> quota >> period && quota != "max" && period > 0) {
    long long q = std::atoll(quota.c_str());
    if (q > 0) cores = std::min<int>(cores, static_cast<int>(std::max(1LL, (q + period - 1) / period)));
  }
  return std::max(1, cores);
}

}  // namespace

int RunTrainer(const Options& o) {
  EventLog log(o.log_format);
  if (o.device == Device::kGpu) {
    log.Error("--device gpu: this build of tj-trainer has no GPU backend yet; use --device cpu "
              "(or auto)");
    return kExitUsage;
  }
  std::optional<cluster::TfConfig> tf_config;
  if (!o.tf_config.empty()) {
    auto parsed = cluster::ParseTfConfig(o.tf_config);
    if (!parsed.ok()) {
      log.Error(parsed.status().message());
      return kExitUsage;
    }
    tf_config = *parsed;
  }
  const bool evaluator =
      o.role == Role::kEvaluator || (tf_config && tf_config->is_evaluator());
  const bool is_chief = !evaluator && (!tf_config || tf_config->is_chief());
  const std::string role = evaluator ? "evaluator" : is_chief ? "chief" : "worker";

  auto dataset = data::LoadDataset(o.data_dir);
  if (!dataset.ok()) {
    log.Error(dataset.status().message());
    return kExitFailure;
  }
  nn::ThreadPool pool(o.threads > 0 ? o.threads : UsableCores());
  Progress progress;
  progress.Update([&](ProgressSnapshot& p) {
    p.role = role;
    p.total_epochs = o.epochs;
  });
  auto observability = Observability::Start(o, role, evaluator || is_chief, &progress, &log);
  if (!observability.ok()) {
    log.Error(observability.status().message());
    return kExitUsage;
  }
  ScalarSink scalars = (*observability)->Scalars();

  if (o.evaluate_only) {
    return EvaluateExportedModel({&o, &*dataset, &pool, &log, &progress, scalars});
  }
  if (evaluator) return RunEvaluator({&o, &*dataset, &pool, &log, &progress, scalars});

  std::unique_ptr<collective::Communicator> comm;
  if (tf_config) {
    collective::GlooOptions go;
    go.config = *tf_config;
    go.rendezvous_key = o.rendezvous_key;
    go.rendezvous_timeout = o.rendezvous_timeout;
    go.collective_timeout = o.collective_timeout;
    go.log = &log;
    auto connected = collective::ConnectGloo(go);
    if (!connected.ok()) {
      log.Error(connected.status().message());
      // A refused key is a configuration error (or an intruder): restarting cannot help.
      bool refused = connected.status().message().find("wrong TJ_RENDEZVOUS_KEY") != std::string::npos;
      return refused ? kExitFailure : kExitPeerLost;
    }
    comm = std::move(*connected);
  } else {
    comm = collective::MakeSingleProcessCommunicator();
  }
  TrainingContext context{&o, &*dataset, comm.get(), &pool, &log, &progress, is_chief, scalars};
  TrainingOutcome outcome = RunTraining(context);
  if (!outcome.status.ok()) {
    progress.Update([](ProgressSnapshot& p) { p.state = "failed"; });
    log.Error(outcome.status.message());
  }
  return outcome.exit_code != kExitOk || outcome.status.ok() ? outcome.exit_code : kExitFailure;
}

}  // namespace tj::train
