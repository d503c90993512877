// The synchronous data-parallel training loop of the chief and the workers: restore, then
// per step compute the gradients of this replica's slice, all-reduce them (one fused call,
// with the step's loss and accuracy counters riding along), apply Adam; per epoch report,
// checkpoint and back up. Every replica runs the same loop and ends with bitwise the same
// weights. In elastic mode (Options::elastic_shards) a replica's slice is one or more shards
// of the global batch, and the weights are bitwise the same at every worker count.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/collective/communicator.h"
#include "trainer/data/idx_reader.h"
#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/thread_pool.h"
#include "trainer/train/declared_model.h"
#include "trainer/train/fingerprint.h"
#include "trainer/train/options.h"
#include "trainer/train/progress.h"
#include "trainer/train/step_backend.h"
#include "trainer/train/stop_request.h"
#include "trainer/train/training_data.h"

namespace tj::train {

// Receives one scalar per call (TensorBoard): tag, step, value.
using ScalarSink = std::function<void(std::string_view tag, int64_t step, float value)>;

struct TrainingContext {
  const Options* options = nullptr;
  // The built-in model's IDX data; null for a declared model, which takes `data`.
  const data::Dataset* dataset = nullptr;
  collective::Communicator* comm = nullptr;  // size 1 for a single process
  nn::ThreadPool* pool = nullptr;
  // The SIMD target's kernels of every computation on the CPU.
  const nn::cpu::Kernels* kernels = &nn::cpu::BestKernels();
  EventLog* log = nullptr;
  Progress* progress = nullptr;
  bool is_chief = true;  // only the chief writes backups, checkpoints, exports and summaries
  ScalarSink scalars;    // may be empty
  // Where the steps run; null: the CPU backend over `pool`.
  StepBackend* backend = nullptr;
  // All-reduces the backend's reduce_buffer() (NCCL for device buffers); null: `comm`.
  collective::Communicator* gradient_comm = nullptr;
  // A stop asked from outside (SIGTERM); null: none can be. The loop switches it to
  // kStopAtStepEnd while it steps, and stops every replica after the same step when any
  // replica's request is set: the chief backs that step up, the outcome's code is the
  // request's exit code.
  StopRequest* stop = nullptr;
  // The declared model to train (--model-config), borrowed; null: the built-in seeds' CNN.
  // With a model and no `backend`, the loop makes the declared model's CPU backend.
  const DeclaredModel* model = nullptr;
  // The declared model's training and evaluation sets (training_data.h), borrowed.
  const TrainingData* data = nullptr;
};

struct TrainingOutcome {
  Status status;
  int exit_code = kExitOk;  // kExitPeerLost when the collective failed or a stop was asked
};

// The training loop alone, on a context the caller has set up (the data loaded, the collective
// connected): restore, train every epoch, report, checkpoint, back up. The whole tj-trainer
// program around it is RunTrainerProgram (run.h).
TrainingOutcome RunTrainingLoop(const TrainingContext& context);

}  // namespace tj::train
