#include "trainer/train/stop_request.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace tj::train {

bool StopRequest::Request() {
  requested_.store(true);
  return mode_.load() == Mode::kStopAtStepEnd;
}

void StopRequest::HandleTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([this, set] {
    int sig = 0;
    sigwait(&set, &sig);
    signal_.store(sig);
    if (Request()) {
      std::fprintf(stderr,
                   "received signal %d: finishing the current step, backing it up, then exiting "
                   "%d (a second signal exits at once)\n",
                   sig, exit_code_);
      sigwait(&set, &sig);
      std::fprintf(stderr, "received signal %d again: exiting at once without a backup\n", sig);
      std::fflush(nullptr);
      std::_Exit(128 + sig);
    }
    std::fprintf(stderr, "received signal %d outside the step loop: nothing to save, exiting %d\n",
                 sig, exit_code_);
    std::fflush(nullptr);
    std::_Exit(exit_code_);
  }).detach();
}

}  // namespace tj::train
