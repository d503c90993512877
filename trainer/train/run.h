// A whole tj-trainer run: picks the role (TF_CONFIG or --role), loads the data, connects the
// collective, starts the status server and TensorBoard writer, and runs the training loop
// or the evaluator. Returns the process's exit code (options.h).
#pragma once

#include "trainer/train/options.h"

namespace tj::train {

int RunTrainer(const Options& options);

}  // namespace tj::train
