#include "trainer/train/stop_request.h"

#include <cstdio>
#include <cstdlib>

#include "common/termination_signals.h"

namespace tj::train {

bool StopRequest::Request() {
  requested_.store(true);
  return mode_.load() == Mode::kStopAtStepEnd;
}

void StopRequest::HandleTerminationSignals() {
  tj::HandleTerminationSignals([this, first = true](int sig) mutable {
    if (!first) {
      std::fprintf(stderr, "received signal %d again: exiting at once without a backup\n", sig);
      std::fflush(nullptr);
      std::_Exit(128 + sig);
    }
    first = false;
    signal_.store(sig);
    if (Request()) {
      std::fprintf(stderr,
                   "received signal %d: finishing the current step, backing it up, then exiting "
                   "%d (a second signal exits at once)\n",
                   sig, exit_code_);
      return;
    }
    std::fprintf(stderr, "received signal %d outside the step loop: nothing to save, exiting %d\n",
                 sig, exit_code_);
    std::fflush(nullptr);
    std::_Exit(exit_code_);
  });
}

}  // namespace tj::train
