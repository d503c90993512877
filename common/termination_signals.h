// Graceful shutdown for the project's daemons: SIGTERM and SIGINT become a stop request.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <stop_token>
#include <thread>

namespace tj {

// Blocks SIGTERM and SIGINT in the calling thread (call it before starting other threads, so
// they inherit the mask) and returns a stop source that a detached thread requests when
// either signal arrives.
inline std::stop_source StopOnTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::stop_source stop;
  std::thread([set, stop]() mutable {
    int sig = 0;
    sigwait(&set, &sig);
    stop.request_stop();
  }).detach();
  return stop;
}

}  // namespace tj
