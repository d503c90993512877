// status.goodput: what failures and waiting cost a job, as large-training teams report it.
// Time lost per restart cause (the work since the last backup, redone by the next gang, and
// the time from the restart to the next gang's first step), steps lost per cause (the global
// step the gang had reached beyond its last backup), time queued in Kueue, time to the first
// step, and the effective training time ratio (goodput). Kept by the reconciler's goodput
// rules (operator/controller/reconciler_goodput.cpp); docs/operator.md says how each is counted.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace tj::api {

struct GoodputLoss {
  int32_t restarts = 0;
  double seconds = 0;  // work redone plus the time to the next gang's first step
  int64_t steps = 0;   // global steps beyond the last backup (0 where the program reports none)
  bool operator==(const GoodputLoss&) const = default;
};

struct Goodput {
  double queued_seconds = 0;  // waiting for Kueue's admission, every wait added
  // From the job's creation to its first reported step, less the time queued; unset until then.
  std::optional<double> time_to_first_step_seconds;
  std::map<std::string, GoodputLoss> lost;  // by restart cause (Failed, Preempted, Stalled...)
  // The time the job trained, over its time since creation (0..1): what is neither queued,
  // nor before the first step, nor lost to restarts. Unset until the first step.
  std::optional<double> ratio;
  // When the current gang reported its first step (RFC 3339); unset while it has not.
  std::optional<std::string> training_since;
  // The restart whose recovery is being timed: its cause and when it was decided; cleared,
  // the time added to the cause's loss, when the next gang reports its first step.
  std::optional<std::string> recovering_cause, recovering_since;

  bool operator==(const Goodput&) const = default;
  bool Empty() const { return *this == Goodput{}; }
  // Lenient: malformed fields are dropped (the operator owns status).
  static Goodput FromJson(const nlohmann::json& j);
  // {queuedSeconds, timeToFirstStepSeconds, lost: {<cause>: {restarts, seconds, steps}},
  //  ratio, trainingSince, recovering: {cause, since}}; absent fields are left out.
  nlohmann::json ToJson() const;
};

}  // namespace tj::api
