// Everything a tj-trainer run is configured with: the command-line flags (main.cpp parses
// them) and what the environment adds (TF_CONFIG, TJ_RENDEZVOUS_KEY, TJ_JOB_UID,
// TJ_RESTART_COUNT, TJ_ELASTIC_SHARDS, TJ_MODEL_CONFIG).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/event_log.h"
#include "trainer/cluster/config/gang_identity.h"
#include "trainer/collective/ring_allreduce.h"
#include "trainer/data/batch_prefetcher.h"
#include "trainer/data/dataset.h"
#include "trainer/data/open_dataset.h"

namespace tj::train {

// Exit codes. 75 (EX_TEMPFAIL) means "a peer was lost or unreachable: restart the gang";
// the operator treats it as retryable. 65 (EX_DATAERR) means "training diverged: the loss or
// a gradient is not finite"; a rerun from the same backup would diverge the same way, so it
// is not retryable. 2 is a usage error; 1 any other failure.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNonFinite = 65;
inline constexpr int kExitPeerLost = 75;

enum class Device { kAuto, kCpu, kGpu };
using data::DatasetFormat;  // --dataset-format

// The dataset flags: what a declared model trains and is evaluated on (training_data.h). The
// built-in seeds' CNN reads the IDX files of Options::data_dir only.
struct DatasetOptions {
  DatasetFormat format = DatasetFormat::kIdx;
  // --train-data, --eval-data: an IDX directory (both splits; Options::data_dir when empty),
  // an .npz (x_train/y_train; its x_test/y_test, or --eval-data's, the evaluation set), two
  // .npy files "IMAGES,LABELS", an image folder root, a TFRecord file or directory.
  std::string train_path;
  std::string eval_path;
  // --image-size, --image-channels: the shape encoded images are fitted to (0 x 0: the first
  // image's size); for arrays a check of what the files hold. channels 0: 3 for encoded
  // images, the files' for arrays.
  data::ImageShape image;
  int classes = 0;  // --num-classes; 0: inferred from the data
  data::AugmentOptions augment;
  data::Normalization normalization;
  int threads = 1;             // --data-threads: decoding threads besides the step's
  int prefetch_batches = 2;    // --prefetch-batches: steps decoded ahead
  data::DatasetLimits limits;  // --max-image-bytes, --max-record-bytes, --max-array-bytes
};
enum class Role { kAuto, kEvaluator };
enum class OptimizerKind { kAdam, kSgd };

// How a declared model trains (recipe.h checks it; the built-in seeds' CNN takes the defaults
// only), as the Keras 3 arguments of the same names: keras.optimizers.Adam or SGD(momentum,
// nesterov, weight_decay) with learning_rate a schedule (nn::LearningRateSchedule's text),
// and keras.losses.CategoricalCrossentropy(label_smoothing).
struct RecipeOptions {
  OptimizerKind optimizer = OptimizerKind::kAdam;  // --optimizer
  double momentum = 0.0;                           // --momentum: SGD's, in [0, 1)
  bool nesterov = false;                           // --nesterov: SGD with momentum
  double weight_decay = 0.0;                       // --weight-decay: w -= w * wd * lr
  std::string lr_schedule = "seeds";               // --lr-schedule
  double label_smoothing = 0.0;                    // --label-smoothing: in [0, 1)
};

struct Options {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  DatasetOptions data;
  // A declared model (--model-config, TJ_MODEL_CONFIG): the path of a Keras model's JSON
  // (`model.to_json()`) to train, evaluate or export instead of the built-in seeds' CNN, on
  // the CPU. Empty: the built-in model.
  std::string model_config;
  // A declared model's starting weights (--initial-weights): a Keras 3 .weights.h5 file
  // (model.save_weights) loaded instead of the initializers' values at a fresh start; a
  // resume keeps its backup's weights. Empty: the initializers'.
  std::string initial_weights;
  RecipeOptions recipe;
  int epochs = 12;
  int batch_size = 64;      // per replica; in elastic mode per shard
  int steps_per_epoch = 0;  // a cap; 0 = the whole epoch
  uint64_t seed = 42;
  int threads = 0;  // 0 = every core the process may use
  // The CPU kernels' SIMD target (TJ_CPU_TARGET): "auto" (the best this CPU runs) or one name
  // of nn::cpu::CompiledTargets().
  std::string cpu_target = "auto";
  Device device = Device::kAuto;
  // The CUDA device of this process: one GPU per process, several processes per machine
  // (LOCAL_RANK, as torchrun sets it; 0 when unset). CUDA_VISIBLE_DEVICES narrows what is
  // visible first.
  int local_rank = 0;
  LogFormat log_format = LogFormat::kJson;
  Role role = Role::kAuto;

  // Multi-worker (TF_CONFIG).
  std::string tf_config;  // the TF_CONFIG environment variable, empty when unset
  // The job's UID (TJ_JOB_UID), key (TJ_RENDEZVOUS_KEY) and the gang's number
  // (TJ_RESTART_COUNT, the job's status.restartCount), set by the operator: every connection
  // between the tasks proves the key for the gang; backups live in a directory of the job's
  // own, are fenced by gang and, like checkpoints, signed with the key. Unset (a run by hand):
  // no UID (the backup directory as given), gang -1 (no fencing), and the key the user gives
  // every task.
  cluster::GangIdentity identity;
  std::chrono::milliseconds rendezvous_timeout{300000};
  std::chrono::milliseconds collective_timeout{60000};
  // The gradients' type on the wire of the CPU all-reduce (--allreduce-dtype). The GPU's
  // NCCL all-reduce is float32 whatever this says.
  collective::WireType allreduce_wire = collective::WireType::kFloat32;
  // The CPU all-reduce: the trainer's ring (true) or Gloo's own (--allreduce-algorithm gloo).
  bool ring_allreduce = true;
  // Elastic mode (--elastic-shards, TJ_ELASTIC_SHARDS): the global batch is this many shards
  // of batch_size images at every worker count that divides it, summed in one order, so the
  // run's results do not depend on the worker count and a backup resumes at another one.
  // 0: off (the global batch is batch_size x workers).
  int elastic_shards = 0;

  // BackupAndRestore, checkpoints, export.
  std::string backup_dir;
  int save_freq_steps = 0;  // 0 = "epoch"; N = every N steps
  bool keep_backup = false;
  std::string checkpoint_dir;
  int keep_checkpoints = 5;
  std::string export_dir;

  // Observability.
  std::string log_dir;  // TensorBoard event files
  int status_port = 0;  // 0 = no status server

  // Evaluation.
  bool evaluate_only = false;  // evaluate --model on the test set and exit
  std::string model_dir;
  std::chrono::milliseconds eval_poll_interval{1000};
};

}  // namespace tj::train
