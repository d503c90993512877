// A whole tj-trainer run: picks the role (TF_CONFIG or --role), loads the data, connects the
// collective, starts the status server and TensorBoard writer, and runs the training loop
// or the evaluator. Returns the process's exit code (options.h).
#pragma once

#include "trainer/train/options.h"
#include "trainer/train/stop_request.h"

namespace tj::train {

// The whole tj-trainer program after its flags are parsed (main.cpp calls it): everything
// above, the training loop (training_loop.h, RunTrainingLoop) being one part of it. `stop`
// (may be null): a stop asked from outside, which the training loop honours after a step
// every replica agrees on (stop_request.h). Returns the process's exit code.
int RunTrainerProgram(const Options& options, StopRequest* stop = nullptr);

}  // namespace tj::train
