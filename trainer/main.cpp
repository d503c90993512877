// tj-trainer: flags and environment in, a run out. See trainer/train/run.h.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "common/version.h"
#include "trainer/checkpoint/backup_manager.h"
#include "trainer/train/options.h"
#include "trainer/train/run.h"
#include "trainer/train/training_data.h"

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Reads the integer env var `name` into `out` when it is set; false (after a message on stderr
// saying what was `expected`) when it is not an integer in [min, max].
bool EnvInt(const char* name, long min, long max, const char* expected, int& out) {
  const std::string value = Env(name);
  if (value.empty()) return true;
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (*end != '\0' || n < min || n > max) {
    std::fprintf(stderr, "error: %s=%s: expected %s\n", name, value.c_str(), expected);
    return false;
  }
  out = static_cast<int>(n);
  return true;
}

// The flags that are not Options fields as they are typed: converted by ApplyFlags.
struct RawFlags {
  std::string device = "auto", log_format = "json", role = "auto", save_freq = "epoch",
              allreduce_dtype = "float32", allreduce_algorithm = "ring";
  double rendezvous_timeout_s = 300, collective_timeout_s = 60, eval_poll_s = 1;
  std::string dataset_format = "idx", image_size, normalize_mean, normalize_std;
  std::string optimizer = "adam";
};

// "a,b,c" into finite floats (positive ones when `positive`); false when it is not that.
bool ParseFloatList(const std::string& text, bool positive, std::vector<float>& out) {
  std::vector<float> values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    const float v = std::strtof(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v) || (positive && !(v > 0.0f))) {
      return false;
    }
    values.push_back(v);
    start = comma + 1;
  }
  if (values.size() > 16) return false;
  out = std::move(values);
  return true;
}

// The dataset flags (training_data.h checks them together).
void DefineDatasetFlags(CLI::App& app, tj::train::DatasetOptions& d, RawFlags& f) {
  app.add_option("--dataset-format", f.dataset_format,
                 "idx|npz|npy|folder|tfrecord: what --train-data and --eval-data hold (idx: "
                 "--data-dir; every format but idx trains declared models only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"idx", "npz", "npy", "folder", "tfrecord"}));
  app.add_option("--train-data", d.train_path,
                 "The training set: an IDX directory, an .npz, IMAGES.npy,LABELS.npy, the root "
                 "of <class>/<image> folders, or a TFRecord file or directory");
  app.add_option("--eval-data", d.eval_path,
                 "The evaluation set, as --train-data (an .npz: its x_test/y_test; default for "
                 "npz: --train-data's)");
  app.add_option("--image-size", f.image_size,
                 "HxW: the size folder and TFRecord images are fitted to (default: the first "
                 "image's); for arrays, a check");
  app.add_option("--image-channels", d.image.channels,
                 "1 (grey) or 3 (RGB) for folder and TFRecord images (default 3); for arrays, a "
                 "check")
      ->check(CLI::IsMember({1, 3}));
  app.add_option("--num-classes", d.classes, "Classes (0: inferred from the data)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--augment-crop-pad", d.augment.pad,
                 "Random crop of the training images padded by this many zero pixels (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_flag("--augment-flip", d.augment.flip, "Random left-right mirror of training images");
  app.add_option("--normalize-mean", f.normalize_mean,
                 "Per-channel mean of pixel/255 subtracted, a,b,c (default 0)");
  app.add_option("--normalize-std", f.normalize_std,
                 "Per-channel std of pixel/255 divided by, a,b,c (default 1)");
  app.add_option("--data-threads", d.threads, "Threads decoding batches ahead of the step")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  app.add_option("--prefetch-batches", d.prefetch_batches, "Steps' batches decoded ahead")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--max-image-bytes", d.limits.max_image_bytes, "Largest file of an image folder")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  app.add_option("--max-record-bytes", d.limits.max_record_bytes, "Largest TFRecord record")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{4} << 30));
  app.add_option("--max-array-bytes", d.limits.max_array_bytes, "Largest NumPy array")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
}

// A declared model's recipe (recipe.h checks the values).
void DefineRecipeFlags(CLI::App& app, tj::train::RecipeOptions& r, RawFlags& f) {
  app.add_option("--optimizer", f.optimizer,
                 "adam|sgd: a declared model's optimizer (Keras' Adam or SGD; see docs/trainer.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"adam", "sgd"}));
  app.add_option("--momentum", r.momentum, "SGD's momentum, in [0, 1)")->capture_default_str();
  app.add_flag("--nesterov", r.nesterov, "SGD with Nesterov momentum (needs --momentum > 0)");
  app.add_option("--weight-decay", r.weight_decay,
                 "Decoupled weight decay w -= w x WD x lr before each update (0: off; frozen "
                 "layers never)")
      ->capture_default_str();
  app.add_option("--lr-schedule", r.lr_schedule,
                 "A declared model's learning rate: seeds | constant:LR | step:LR@1,LR2@E2,... | "
                 "cosine:LR[,warmup=STEPS][,alpha=A]")
      ->capture_default_str();
  app.add_option("--label-smoothing", r.label_smoothing,
                 "Targets y x (1 - E) + E / classes in the loss, E in [0, 1) (Keras' "
                 "label_smoothing)")
      ->capture_default_str();
}

void DefineFlags(CLI::App& app, tj::train::Options& o, RawFlags& f) {
  app.add_option("--data-dir", o.data_dir, "Directory with the four MNIST-format IDX files")
      ->capture_default_str();
  DefineDatasetFlags(app, o.data, f);
  app.add_option("--model-config", o.model_config,
                 "A Keras model's JSON (model.to_json()) to train, evaluate or export instead of "
                 "the built-in CNN, on the CPU (default: $TJ_MODEL_CONFIG, else the built-in "
                 "model; see docs/trainer.md)");
  app.add_option("--initial-weights", o.initial_weights,
                 "A Keras 3 .weights.h5 file (model.save_weights) of the --model-config model: "
                 "its weights start a fresh run (a resume keeps its backup's)");
  DefineRecipeFlags(app, o.recipe, f);
  app.add_option("--epochs", o.epochs, "Epochs to train")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--batch-size", o.batch_size,
                 "Images per replica per step (in elastic mode: per shard)")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app.add_option("--steps-per-epoch", o.steps_per_epoch, "Cap on steps per epoch (0: whole epoch)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "Seed of the initial weights and the data order")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads (0: every usable core)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--device", f.device,
                 "auto|cpu|gpu (auto: the GPU when one is visible and the build has CUDA; the "
                 "GPU is LOCAL_RANK's, 0 by default)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  app.add_option("--log-format", f.log_format, "json|text")
      ->capture_default_str()
      ->check(CLI::IsMember({"json", "text"}));
  app.add_option("--role", f.role, "auto (from TF_CONFIG) | evaluator")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "evaluator"}));
  app.add_option("--rendezvous-timeout", f.rendezvous_timeout_s, "Seconds to wait for the peers")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--collective-timeout", f.collective_timeout_s,
                 "Seconds a collective may wait on a peer before the process exits 75")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--allreduce-dtype", f.allreduce_dtype,
                 "float32|bfloat16: the gradients' type on the wire of the CPU all-reduce "
                 "(bfloat16: half the bytes, rounded sums; see docs/trainer.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  app.add_option("--allreduce-algorithm", f.allreduce_algorithm,
                 "ring|gloo: the CPU all-reduce (gloo: Gloo's own, float32 only, its "
                 "connections NOT authenticated)")
      ->capture_default_str()
      ->check(CLI::IsMember({"ring", "gloo"}));
  app.add_option("--elastic-shards", o.elastic_shards,
                 "Elastic mode: the global batch is this many shards of --batch-size images at "
                 "every worker count that divides it, with bitwise the same results, and a "
                 "backup resumes at another worker count (0: off; default: $TJ_ELASTIC_SHARDS, "
                 "else 0; see docs/trainer.md)")
      ->check(CLI::Range(0, 65536));
  app.add_option("--backup-dir", o.backup_dir, "BackupAndRestore directory (shared by the job)");
  app.add_option("--save-freq", f.save_freq, "epoch, or a number of steps between backups")
      ->capture_default_str();
  app.add_flag("--keep-backup", o.keep_backup, "Keep the backup after training succeeds");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "Directory for ckpt-<epoch> files");
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "Checkpoints to keep (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--export-dir", o.export_dir, "Directory for the final model");
  app.add_option("--log-dir", o.log_dir, "TensorBoard event files (train/ and eval/)");
  app.add_option("--status-port", o.status_port,
                 "Port of GET /status and /metrics (0: off; default: $TJ_STATUS_PORT, else 0)")
      ->check(CLI::Range(0, 65535));
  app.add_flag("--evaluate-only", o.evaluate_only, "Evaluate --model on the test set and exit");
  app.add_option("--model", o.model_dir, "An --export-dir directory, for --evaluate-only");
  app.add_option("--eval-poll-interval", f.eval_poll_s, "Evaluator: seconds between polls")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

// The raw flags into `o`; false (after a message on stderr) on a value CLI11 cannot check.
bool ApplyFlags(const RawFlags& f, tj::train::Options& o) {
  if (f.save_freq == "epoch") {
    o.save_freq_steps = 0;
  } else {
    char* end = nullptr;
    long n = std::strtol(f.save_freq.c_str(), &end, 10);
    if (f.save_freq.empty() || *end != '\0' || n <= 0) {
      std::fprintf(stderr,
                   "error: --save-freq %s: expected \"epoch\" or a positive number of steps\n",
                   f.save_freq.c_str());
      return false;
    }
    o.save_freq_steps = static_cast<int>(n);
  }
  tj::train::ParseDatasetFormat(f.dataset_format, &o.data.format);  // checked by CLI11 above
  o.recipe.optimizer =
      f.optimizer == "sgd" ? tj::train::OptimizerKind::kSgd : tj::train::OptimizerKind::kAdam;
  // An IDX directory given as --train-data is the --data-dir of the built-in model too.
  if (o.data.format == tj::train::DatasetFormat::kIdx && !o.data.train_path.empty()) {
    o.data_dir = o.data.train_path;
  }
  if (!f.image_size.empty() && !tj::data::ParseImageSize(f.image_size, &o.data.image)) {
    std::fprintf(stderr,
                 "error: --image-size %s: expected HEIGHTxWIDTH, each 1-32768 (e.g. 32x32)\n",
                 f.image_size.c_str());
    return false;
  }
  for (const auto& [flag, text, positive, out] :
       {std::tuple{"--normalize-mean", &f.normalize_mean, false, &o.data.normalization.mean},
        std::tuple{"--normalize-std", &f.normalize_std, true, &o.data.normalization.stddev}}) {
    if (!text->empty() && !ParseFloatList(*text, positive, *out)) {
      std::fprintf(stderr,
                   "error: %s %s: expected one %snumber per channel, comma-separated (e.g. "
                   "0.49,0.48,0.45)\n",
                   flag, text->c_str(), positive ? "positive " : "finite ");
      return false;
    }
  }
  if (o.evaluate_only && o.model_dir.empty()) {
    std::fprintf(
        stderr, "error: --evaluate-only needs --model DIR (a directory written by --export-dir)\n");
    return false;
  }
  o.device = f.device == "cpu"   ? tj::train::Device::kCpu
             : f.device == "gpu" ? tj::train::Device::kGpu
                                 : tj::train::Device::kAuto;
  o.log_format = f.log_format == "text" ? tj::LogFormat::kText : tj::LogFormat::kJson;
  o.role = f.role == "evaluator" ? tj::train::Role::kEvaluator : tj::train::Role::kAuto;
  o.rendezvous_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(f.rendezvous_timeout_s * 1000));
  o.allreduce_wire = *tj::collective::ParseWireType(f.allreduce_dtype);  // checked by CLI11 above
  o.ring_allreduce = f.allreduce_algorithm == "ring";
  o.collective_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(f.collective_timeout_s * 1000));
  o.eval_poll_interval = std::chrono::milliseconds(static_cast<int64_t>(f.eval_poll_s * 1000));
  return true;
}

// What the environment adds: LOCAL_RANK, TJ_STATUS_PORT (unless --status-port was given),
// TJ_ELASTIC_SHARDS (unless --elastic-shards was given), TJ_MODEL_CONFIG (unless
// --model-config was given), TJ_CPU_TARGET, TF_CONFIG,
// TJ_RENDEZVOUS_KEY, TJ_JOB_UID, TJ_RESTART_COUNT. False (after a message on stderr) on a
// malformed value.
bool ReadEnvironment(const CLI::App& app, tj::train::Options& o) {
  if (!EnvInt("LOCAL_RANK", 0, 1023, "the index of this process's GPU on its machine (0, 1, ...)",
              o.local_rank)) {
    return false;
  }
  // The operator asks for the status endpoint through the environment only (it never adds
  // arguments to a program's command line); an explicit --status-port wins.
  if (app.count("--status-port") == 0 &&
      !EnvInt("TJ_STATUS_PORT", 0, 65535, "a port number 0-65535 (0: no status endpoint)",
              o.status_port)) {
    return false;
  }
  // The operator sets the shard count of an elastic job (its largest gang) the same way.
  if (app.count("--elastic-shards") == 0 &&
      !EnvInt("TJ_ELASTIC_SHARDS", 0, 65536,
              "the shard count of elastic mode, 0-65536 (0: off; the job's largest worker count)",
              o.elastic_shards)) {
    return false;
  }
  // A job's pods all take the same model file (a ConfigMap, say) through the environment.
  if (app.count("--model-config") == 0) o.model_config = Env("TJ_MODEL_CONFIG");
  // Checked against this CPU by the run, which knows the targets.
  if (!Env("TJ_CPU_TARGET").empty()) o.cpu_target = Env("TJ_CPU_TARGET");
  o.tf_config = Env("TF_CONFIG");
  // Set by the operator for its pods: which job and gang this process belongs to.
  tj::cluster::GangIdentity& identity = o.identity;
  identity.job_key = Env("TJ_RENDEZVOUS_KEY");
  identity.job_uid = Env("TJ_JOB_UID");
  if (!identity.job_uid.empty() && !tj::checkpoint::BackupManager::ValidJobUid(identity.job_uid)) {
    std::fprintf(stderr,
                 "error: TJ_JOB_UID=%s: expected a Kubernetes UID (letters, digits and '-', at "
                 "most 128)\n",
                 identity.job_uid.c_str());
    return false;
  }
  int gang = -1;
  if (!EnvInt("TJ_RESTART_COUNT", 0, 1 << 30, "the gang number (0, 1, ...)", gang)) return false;
  identity.gang = gang;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  tj::train::Options o;
  RawFlags f;
  CLI::App app{
      "tj-trainer: synchronous data-parallel training of the seeds' CNN, or of a model declared "
      "in Keras JSON, on MNIST-format IDX data (declared models: NumPy, image folders, TFRecord "
      "too).\n"
      "Single process without TF_CONFIG; one replica per process with it (MultiWorkerMirrored).\n"
      "Prints one JSON object per line on stdout; errors on stderr."};
  DefineFlags(app, o, f);
  app.set_version_flag("--version", std::string("tj-trainer ") + tj::kVersionText);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : tj::train::kExitUsage;
  }
  if (!ApplyFlags(f, o) || !ReadEnvironment(app, o)) return tj::train::kExitUsage;
  // SIGTERM (eviction, preemption, drain) stops training after a step every replica agrees
  // on, backed up; the process exits with the retryable code, so the gang resumes there.
  static tj::train::StopRequest stop(tj::train::kExitPeerLost);
  stop.HandleTerminationSignals();
  return tj::train::RunTrainerProgram(o, &stop);
}
