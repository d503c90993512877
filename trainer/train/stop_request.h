// A request from outside to stop training: SIGTERM (the pod is evicted, preempted, drained
// or deleted) or SIGINT. Inside the step loop the request is only noted; the loop votes on it
// in every step's all-reduce, so all replicas stop after the same step, the chief backs it
// up and every replica exits with the retryable code. Outside the step loop (loading data,
// rendezvous, the evaluator) there is nothing to save and the process exits at once. A
// second signal always ends the process at once, as does the kubelet's SIGKILL when the
// grace period runs out.
#pragma once

#include <atomic>

namespace tj::train {

class StopRequest {
 public:
  // What a first signal does.
  enum class Mode {
    kExitNow,        // exit with `exit_code` at once (default)
    kStopAtStepEnd,  // note it; the training loop stops after the step it agrees on
  };

  // `exit_code`: the code of a process that stops on request (the retryable one).
  explicit StopRequest(int exit_code) : exit_code_(exit_code) {}
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // Blocks SIGTERM and SIGINT in the calling thread (call it before other threads start, so
  // they inherit the mask) and handles them on a thread of their own
  // (common/termination_signals.h). The object must live until the process ends. Call at most
  // once per process.
  void HandleTerminationSignals();

  // Thread-safe.
  void SetMode(Mode mode) { mode_.store(mode); }
  bool requested() const { return requested_.load(); }
  // What a first signal does, without one (tests, and the signal thread). Returns false when
  // the mode is kExitNow: the caller then ends the process.
  bool Request();
  // The signal that asked, 0 when none did (SIGTERM = 15).
  int signal() const { return signal_.load(); }
  int exit_code() const { return exit_code_; }

 private:
  const int exit_code_;
  std::atomic<Mode> mode_{Mode::kExitNow};
  std::atomic<bool> requested_{false};
  std::atomic<int> signal_{0};
};

}  // namespace tj::train
