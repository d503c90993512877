// Graceful shutdown for the project's programs: SIGTERM and SIGINT handled on one thread of
// their own (sigwait), never in an asynchronous signal handler. The daemons (tj-operator,
// tj-process-node) turn them into a stop request; the trainer (trainer/train/stop_request.h)
// into a vote at the next step.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <functional>
#include <stop_token>
#include <thread>
#include <utility>

namespace tj {

// Blocks SIGTERM and SIGINT in the calling thread (call it before starting other threads, so
// they inherit the mask) and starts a detached thread that calls `on_signal(signal number)`
// for each of them that arrives, one at a time, in order. Call at most once per process.
inline void HandleTerminationSignals(std::function<void(int)> on_signal) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, on_signal = std::move(on_signal)] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) on_signal(sig);
    }
  }).detach();
}

// HandleTerminationSignals with a stop source that either signal requests.
inline std::stop_source StopOnTerminationSignals() {
  std::stop_source stop;
  HandleTerminationSignals([stop](int) mutable { stop.request_stop(); });
  return stop;
}

}  // namespace tj
