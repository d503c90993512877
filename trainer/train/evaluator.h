// The evaluator role (Keras' SidecarEvaluator): follows the chief's per-epoch checkpoints,
// evaluates the newest on the test set, and exits once the final one is evaluated. Also the
// one-shot evaluation of an exported model (--evaluate-only --model DIR).
#pragma once

#include "common/event_log.h"
#include "trainer/data/idx_reader.h"
#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/thread_pool.h"
#include "trainer/train/declared_model.h"
#include "trainer/train/options.h"
#include "trainer/train/progress.h"
#include "trainer/train/training_data.h"
#include "trainer/train/training_loop.h"

namespace tj::train {

struct EvaluatorContext {
  const Options* options = nullptr;
  const data::Dataset* dataset = nullptr;
  nn::ThreadPool* pool = nullptr;
  const nn::cpu::Kernels* kernels = &nn::cpu::BestKernels();
  EventLog* log = nullptr;
  Progress* progress = nullptr;
  ScalarSink scalars;  // may be empty
  // The declared model to evaluate (--model-config), borrowed; null: the built-in seeds' CNN.
  const DeclaredModel* model = nullptr;
  // The declared model's data (its evaluation set), borrowed; `dataset` is the built-in's.
  const TrainingData* data = nullptr;
};

// Returns the exit code: 0 after the final checkpoint was evaluated. A checkpoint of another
// model than the context's is an error naming both.
int RunEvaluator(const EvaluatorContext& context);

// --evaluate-only: one evaluation of the exported model in options.model_dir.
int EvaluateExportedModel(const EvaluatorContext& context);

}  // namespace tj::train
