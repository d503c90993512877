// The trainer's outward signs of life besides stdout: the status server (GET /status,
// GET /metrics on --status-port) and the TensorBoard event files (--log-dir: train/ from the
// chief, eval/ from the evaluator). Owns both for the run's duration.
#pragma once

#include <memory>
#include <string>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/train/options.h"
#include "trainer/train/progress.h"
#include "trainer/train/training_loop.h"

namespace tj::train {

class Observability {
 public:
  // `writes_summaries`: whether this process writes TensorBoard files (chief, evaluator).
  static StatusOr<std::unique_ptr<Observability>> Start(const Options& options,
                                                        const std::string& role,
                                                        bool writes_summaries, Progress* progress,
                                                        EventLog* log);
  ~Observability();
  // A sink writing TensorBoard scalars, or an empty function when there is no --log-dir.
  ScalarSink Scalars();

 private:
  Observability() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tj::train
