#include "trainer/train/run.h"

#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "common/version.h"
#include "trainer/cluster/config/tf_config.h"
#include "trainer/collective/gloo_communicator.h"
#include "trainer/train/declared_model.h"
#ifdef TJ_HAVE_NCCL
#include "trainer/collective/nccl_communicator.h"
#endif
#include "trainer/train/evaluator.h"
#include "trainer/train/initial_weights.h"
#include "trainer/train/observability.h"
#include "trainer/train/recipe.h"
#include "trainer/train/step_backend.h"
#include "trainer/train/termination_message.h"
#include "trainer/train/training_data.h"
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
    if (q > 0)
      cores = std::min<int>(cores, static_cast<int>(std::max(1LL, (q + period - 1) / period)));
  }
  return std::max(1, cores);
}

#ifdef TJ_HAVE_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

std::string Env(const char* name, const char* otherwise) {
  const char* v = std::getenv(name);
  return v ? v : otherwise;
}

// NCCL over the GPU backend's stream, its unique id handed out through `bootstrap`.
StatusOr<std::unique_ptr<collective::Communicator>> ConnectGradientCommunicator(
    const Options& o, collective::Communicator* bootstrap, StepBackend* backend) {
#ifdef TJ_HAVE_NCCL
  collective::NcclOptions no;
  no.bootstrap = bootstrap;
  no.device = o.local_rank;
  no.stream = backend->device_stream();
  no.init_timeout = o.rendezvous_timeout;
  no.collective_timeout = o.collective_timeout;
  return collective::ConnectNccl(no);
#else
  (void)o;
  (void)bootstrap;
  (void)backend;
  return Status::Error("GPU training with " + std::to_string(bootstrap->size()) +
                       " workers needs NCCL, and this tj-trainer was built without it; use "
                       "--device cpu or rebuild with NCCL installed");
#endif
}

// The CPU collective (the authenticated ring; Gloo's mesh on request) from TF_CONFIG, or the
// single-process one without it. kExitOk, or the exit code after the error is logged.
int ConnectCollective(const Options& o, const std::optional<cluster::TfConfig>& tf_config,
                      EventLog& log, std::unique_ptr<collective::Communicator>* comm) {
  if (!tf_config) {
    *comm = collective::MakeSingleProcessCommunicator();
    return kExitOk;
  }
  collective::GlooOptions go;
  go.config = *tf_config;
  go.identity = o.identity;
  go.rendezvous_bind_host = cluster::PodListenAddress();
  go.rendezvous_timeout = o.rendezvous_timeout;
  go.collective_timeout = o.collective_timeout;
  go.allreduce_wire = o.allreduce_wire;
  go.ring_allreduce = o.ring_allreduce;
  go.log = &log;
  auto connected = collective::ConnectGloo(go);
  if (!connected.ok()) {
    log.Error(connected.status().message());
    // No key where the collective needs one is a configuration error: restarting cannot
    // help. A refusal by the chief was retried until the rendezvous timeout and is
    // retryable (a gang restart hands every task the Secret's key again).
    const bool refused = connected.status().code() == StatusCode::kPermissionDenied;
    return refused ? kExitFailure : kExitPeerLost;
  }
  *comm = std::move(*connected);
  return kExitOk;
}

// Every replica must step on the same kind of device (their all-reduces must match).
// kExitOk, or the exit code after the error is logged.
int AgreeOnTheDevice(collective::Communicator& comm, StepBackend& backend, EventLog& log) {
  if (comm.size() == 1) return kExitOk;
  float on_gpu = backend.device_buffers() ? 1.0f : 0.0f;
  if (Status s = comm.AllReduceSum(&on_gpu, 1); !s.ok()) {
    log.Error(s.WithContext("agreeing on the device").message());
    return kExitPeerLost;
  }
  if (on_gpu != 0.0f && on_gpu != static_cast<float>(comm.size())) {
    log.Error(std::to_string(static_cast<int>(on_gpu)) + " of " + std::to_string(comm.size()) +
              " replicas train on a GPU and the others on the CPU (this one: " +
              backend.description() + "); give every replica the same --device");
    return kExitFailure;
  }
  return kExitOk;
}

// Empty when --device can be honoured with `gpus` visible, else why not.
std::string DeviceError(const Options& o, int gpus) {
  if (o.device != Device::kGpu) return "";
  if (!o.model_config.empty()) {
    return "--device gpu: declared models (--model-config " + o.model_config +
           ") train on the CPU for now; use --device cpu, or auto (which takes the CPU for them)";
  }
  if (gpus > 0) return "";
  const std::string build = kBuiltWithCuda ? "" : "; this tj-trainer was built without CUDA";
  return "--device gpu: no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES=" +
         Env("CUDA_VISIBLE_DEVICES", "(unset)") + build + "); use --device cpu or auto";
}

// The declared model of --model-config into `model` (nothing without the flag), checked
// against the training set and announced. kExitOk, or the exit code after the error is logged.
int LoadDeclaredModelOfRun(const Options& o, const TrainingData& data, EventLog& log,
                           std::optional<DeclaredModel>* model) {
  if (o.model_config.empty() && !o.initial_weights.empty()) {
    log.Error("--initial-weights " + o.initial_weights +
              ": initial weights are a declared model's (Keras' .weights.h5 of the model that "
              "--model-config declares); give --model-config too, or drop --initial-weights");
    return kExitUsage;
  }
  if (o.model_config.empty()) return kExitOk;
  auto loaded = LoadDeclaredModel(o.model_config);
  const data::ImageDataset& fitted = data.Reference();
  Status fits = loaded.ok() ? CheckModelFitsDataset(*loaded, fitted.shape(), fitted.classes(),
                                                    fitted.source())
                            : loaded.status();
  if (fits.ok() && !o.initial_weights.empty())
    fits = LoadInitialWeights(o.initial_weights, &*loaded);
  if (!fits.ok()) {
    log.Error(fits.message());
    return kExitUsage;
  }
  *model = std::move(*loaded);
  nlohmann::ordered_json event = {{"event", "model"}, {"model_config", (*model)->path}};
  const nlohmann::json identity = DeclaredModelIdentity(**model);
  for (const auto& [key, value] : identity.items()) event[key] = value;
  event["layers"] = (*model)->graph.layers.size();
  if (!o.initial_weights.empty()) {
    event["initial_weights"] = o.initial_weights;
    event["initial_weights_sha256"] = (*model)->initial_weights_sha256;
  }
  log.Emit(event);
  return kExitOk;
}

// The data of the run into `idx` (the built-in model's IDX files) or `data` (a declared
// model's training and evaluation sets, announced; an `evaluating` run given no --train-data
// opens the evaluation set alone). kExitOk, or the exit code after the error
// is logged: 2 for flags that do not fit together or the data, 1 when a file cannot be read.
int OpenDataOfRun(const Options& o, bool evaluating, EventLog& log,
                  std::optional<data::Dataset>* idx, TrainingData* data) {
  const bool declared = !o.model_config.empty();
  for (const std::string& e :
       {DatasetFlagsError(o, declared, evaluating), RecipeFlagsError(o.recipe, declared)}) {
    if (!e.empty()) {
      log.Error(e);
      return kExitUsage;
    }
  }
  if (!declared) {
    auto dataset = data::LoadDataset(o.data_dir);
    if (!dataset.ok()) {
      log.Error(dataset.status().message());
      return kExitFailure;
    }
    *idx = std::move(*dataset);
    return kExitOk;
  }
  auto opened = OpenTrainingData(o, evaluating);
  if (!opened.ok()) {
    log.Error(opened.status().message());
    return kExitFailure;
  }
  *data = std::move(*opened);
  if (std::string e = TrainingDataError(*data, o); !e.empty()) {
    log.Error(e);
    return kExitUsage;
  }
  log.Emit(DatasetEvent(*data, o));
  return kExitOk;
}

// The CPU backend of this replica: the built-in model's, or `model`'s when one is declared. In
// elastic mode each worker computes its share of the shards (the training loop stops every
// worker when the worker count does not divide the shard count).
std::unique_ptr<StepBackend> MakeCpuBackendOfRun(const Options& o, const DeclaredModel* model,
                                                 const data::Dataset* idx, const TrainingData& data,
                                                 nn::ThreadPool* pool, const nn::cpu::Kernels& cpu,
                                                 const collective::Communicator& comm) {
  const int shards = o.elastic_shards > 0 && o.elastic_shards % comm.size() == 0
                         ? o.elastic_shards / comm.size()
                         : 1;
  if (model == nullptr) return MakeCpuBackend(*idx, o.batch_size, pool, cpu, shards);
  const data::ShardPlan plan{.batch_per_shard = o.batch_size,
                             .shards = o.elastic_shards > 0 ? o.elastic_shards : comm.size(),
                             .replicas = comm.size(),
                             .rank = comm.rank(),
                             .steps_cap = o.steps_per_epoch};
  const ShardRange range{.first = comm.rank() * shards, .count = shards, .total = plan.shards};
  const int64_t total_steps =
      int64_t{o.epochs} * std::max(0, plan.StepsPerEpoch(data.train->size()));
  return MakeDeclaredCpuBackend(*model, DeclaredInputOf(o, data, plan), o.batch_size, pool, cpu,
                                range, o.seed, {.recipe = o.recipe, .total_steps = total_steps});
}

// Every replica must train the same model (their all-reduces must match): the chief's
// identity (the built-in model's name, or a declared model's SHA-256) goes to every replica,
// and all of them stop when any differs. kExitOk, or the exit code after the error is logged.
int AgreeOnTheModel(collective::Communicator& comm, const DeclaredModel* model, EventLog& log) {
  if (comm.size() == 1) return kExitOk;
  // 64 characters on every replica: a SHA-256 in hex, or dashes for the built-in model.
  const std::string mine = model ? model->sha256 : std::string(64, '-');
  std::string chiefs = mine;
  if (Status s = comm.Broadcast(chiefs.data(), chiefs.size(), 0); !s.ok()) {
    log.Error(s.WithContext("agreeing on the model").message());
    return kExitPeerLost;
  }
  float differ = chiefs == mine ? 0.0f : 1.0f;
  if (Status s = comm.AllReduceSum(&differ, 1); !s.ok()) {
    log.Error(s.WithContext("agreeing on the model").message());
    return kExitPeerLost;
  }
  if (differ == 0.0f) return kExitOk;
  auto describe = [](const std::string& id) {
    return id == std::string(64, '-') ? std::string("the built-in seeds-cnn")
                                      : "a declared model of model_sha256 " + id;
  };
  const std::string others =
      std::to_string(static_cast<int>(differ)) + " of " + std::to_string(comm.size()) +
      " replicas were given another model than the chief (which trains " + describe(chiefs);
  log.Error(others + (comm.rank() == 0 ? "" : "; this replica " + describe(mine)) +
            "); give every replica the same --model-config (or TJ_MODEL_CONFIG), or none");
  return kExitFailure;
}

// Empty when the options allow elastic mode (or do not ask for it), else why not. Elastic mode
// keeps one order of summation at every worker count: the trainer's ring in float32 on the
// CPU. Gloo's all-reduce and NCCL sum in orders of their own, bfloat16 rounds at every hop.
std::string ElasticModeError(const Options& o) {
  if (o.elastic_shards <= 0) return "";
  const std::string mode =
      "elastic mode (--elastic-shards " + std::to_string(o.elastic_shards) + ") ";
  if (o.device == Device::kGpu) {
    return mode +
           "runs on the CPU: the GPU backend computes one batch per step and NCCL sums in "
           "an order of its own; use --device cpu or auto";
  }
  if (!o.ring_allreduce) {
    return mode +
           "needs the ring all-reduce, whose order of summation it keeps at every worker "
           "count; drop --allreduce-algorithm gloo";
  }
  if (o.allreduce_wire != collective::WireType::kFloat32) {
    return mode +
           "sums in float32 (bfloat16 rounds at every hop, differently at every worker "
           "count); drop --allreduce-dtype " +
           collective::WireTypeName(o.allreduce_wire);
  }
  return "";
}

// What this process is in the job: its TF_CONFIG (none for a run by hand), whether it is the
// evaluator or the chief, and the role's name for logs and /status.
struct RunRole {
  std::optional<cluster::TfConfig> tf_config;
  bool evaluator = false;
  bool is_chief = false;
  std::string name;
};

// kExitOk, or kExitUsage after a TF_CONFIG that does not parse is logged.
int ReadRunRole(const Options& o, EventLog& log, RunRole* role) {
  if (!cluster::DescribesLocalRun(o.tf_config)) {
    auto parsed = cluster::ParseTfConfig(o.tf_config);
    if (!parsed.ok()) {
      log.Error(parsed.status().message());
      return kExitUsage;
    }
    role->tf_config = *parsed;
  }
  const auto& tf = role->tf_config;
  role->evaluator = o.role == Role::kEvaluator || (tf && tf->is_evaluator());
  role->is_chief = !role->evaluator && (!tf || tf->is_chief());
  role->name = role->evaluator ? "evaluator" : role->is_chief ? "chief" : "worker";
  return kExitOk;
}

}  // namespace

int RunTrainerProgram(const Options& o, StopRequest* stop) {
  EventLog log(o.log_format);
  const int gpus = o.device == Device::kCpu ? 0 : VisibleGpus();
  if (std::string e = DeviceError(o, gpus); !e.empty()) {
    log.Error(e);
    return kExitUsage;
  }
  RunRole run_role;
  if (int code = ReadRunRole(o, log, &run_role); code != kExitOk) return code;
  const std::optional<cluster::TfConfig>& tf_config = run_role.tf_config;
  const bool evaluator = run_role.evaluator;
  const bool is_chief = run_role.is_chief;
  const std::string& role = run_role.name;

  std::optional<data::Dataset> idx;  // the built-in model's
  TrainingData data;                 // a declared model's
  if (int code = OpenDataOfRun(o, evaluator || o.evaluate_only, log, &idx, &data);
      code != kExitOk) {
    return code;
  }
  const data::Dataset* dataset = idx ? &*idx : nullptr;
  auto kernels = nn::cpu::KernelsFor(o.cpu_target);
  if (!kernels.ok()) {
    log.Error(kernels.status().message());
    return kExitUsage;
  }
  const nn::cpu::Kernels* cpu = *kernels;
  nn::ThreadPool pool(o.threads > 0 ? o.threads : UsableCores());
  log.Emit({{"event", "start"},
            {"version", kVersionText},
            {"role", role},
            {"threads", pool.size()},
            {"cpu_target", cpu->target},
            {"cpu_targets_supported", nn::cpu::SupportedTargets()}});
  Progress progress;
  progress.Update([&](ProgressSnapshot& p) {
    p.role = role;
    p.total_epochs = o.epochs;
    p.cpu_target = cpu->target;
  });
  auto observability = Observability::Start(o, role, evaluator || is_chief, &progress, &log);
  if (!observability.ok()) {
    log.Error(observability.status().message());
    return kExitUsage;
  }
  ScalarSink scalars = (*observability)->Scalars();

  std::optional<DeclaredModel> declared;
  if (int code = LoadDeclaredModelOfRun(o, data, log, &declared); code != kExitOk) return code;
  const DeclaredModel* model = declared ? &*declared : nullptr;

  const EvaluatorContext evaluation{&o,        dataset, &pool, cpu,  &log,
                                    &progress, scalars, model, &data};
  if (o.evaluate_only) return EvaluateExportedModel(evaluation);
  if (evaluator) return RunEvaluator(evaluation);

  if (std::string e = ElasticModeError(o); !e.empty()) {
    log.Error(e);
    return kExitUsage;
  }
  // The device: auto takes the GPU when one is visible (and the build has CUDA), except in
  // elastic mode and for a declared model, which run on the CPU.
  if (model && o.device == Device::kAuto && gpus > 0) {
    log.Warn("--device auto: " + std::to_string(gpus) +
             " GPU(s) visible, but declared models (--model-config) train on the CPU for now: "
             "training on the CPU");
  }
  std::unique_ptr<StepBackend> backend;
  if (o.device == Device::kGpu ||
      (o.device == Device::kAuto && gpus > 0 && o.elastic_shards == 0 && !model)) {
    auto gpu = MakeGpuBackend(*dataset, o.batch_size, o.local_rank);  // the built-in model's
    if (!gpu.ok()) {
      log.Error("--device " + std::string(o.device == Device::kGpu ? "gpu" : "auto") + ": " +
                gpu.status().message());
      return kExitFailure;
    }
    backend = std::move(*gpu);
  }

  std::unique_ptr<collective::Communicator> comm;
  if (int code = ConnectCollective(o, tf_config, log, &comm); code != kExitOk) return code;
  if (!backend) backend = MakeCpuBackendOfRun(o, model, dataset, data, &pool, *cpu, *comm);
  if (int code = AgreeOnTheDevice(*comm, *backend, log); code != kExitOk) return code;
  if (int code = AgreeOnTheModel(*comm, model, log); code != kExitOk) return code;
  // Device buffers are all-reduced by NCCL, bootstrapped through the Gloo communicator.
  std::unique_ptr<collective::Communicator> gradient_comm;
  if (backend->device_buffers() && comm->size() > 1) {
    if (o.allreduce_wire != collective::WireType::kFloat32) {
      log.Warn("--allreduce-dtype " + std::string(collective::WireTypeName(o.allreduce_wire)) +
               " applies to the CPU all-reduce; NCCL reduces the GPU's gradients in float32");
    }
    auto nccl = ConnectGradientCommunicator(o, comm.get(), backend.get());
    if (!nccl.ok()) {
      log.Error(nccl.status().message());
      return kExitPeerLost;
    }
    gradient_comm = std::move(*nccl);
  }
  TrainingContext context{
      &o,      dataset,       comm.get(),          &pool, cpu,   &log, &progress, is_chief,
      scalars, backend.get(), gradient_comm.get(), stop,  model, &data};
  TrainingOutcome outcome = RunTrainingLoop(context);
  if (!outcome.status.ok()) {
    progress.Update([](ProgressSnapshot& p) { p.state = "failed"; });
    log.Error(outcome.status.message());
  }
  const int exit_code =
      outcome.exit_code != kExitOk || outcome.status.ok() ? outcome.exit_code : kExitFailure;
  if (is_chief && exit_code != kExitOk) {
    // Where the next gang resumes, for the operator (and Kueue) to read once this pod ends.
    const std::string path = TerminationMessagePath();
    if (Status s = WriteTerminationMessage(progress.Get().last_backup, path); !s.ok()) {
      log.Warn(s.message());
    }
  }
  return exit_code;
}

}  // namespace tj::train
