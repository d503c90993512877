// A LeaderElector's term as tests watch it: whether it leads, and when it stopped leading
// (steady clock), through the callbacks it is given.
#pragma once

#include <atomic>
#include <chrono>

#include "kube/leader_election.h"

namespace tj::testing {

class LeaderTerm {
 public:
  using Steady = std::chrono::steady_clock;

  // For the elector; `this` must outlive it.
  kube::LeaderCallbacks Callbacks() {
    return {[this] { leading_ = true; },
            [this] {
              stopped_at_ = Steady::now().time_since_epoch().count();
              leading_ = false;
            },
            {}};
  }
  bool leading() const { return leading_.load(); }
  // How long after `t` the term ended (negative before it ended).
  std::chrono::milliseconds StoppedAfter(Steady::time_point t) const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        Steady::time_point(Steady::duration(stopped_at_.load())) - t);
  }
  Steady::time_point stopped_at() const {
    return Steady::time_point(Steady::duration(stopped_at_.load()));
  }

 private:
  std::atomic<bool> leading_{false};
  std::atomic<Steady::rep> stopped_at_{0};
};

}  // namespace tj::testing
