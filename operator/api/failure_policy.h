// Why a gang restarts, and which of those causes use up spec.runPolicy.backoffLimit: the
// spec's failurePolicy (rules as JobSet's failurePolicy has them) and the restart counts by
// cause that status.restarts shows. Pure values; no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::api {

// The cause of a gang restart (or an evaluator restart), from the pod that caused it.
enum class RestartCause {
  kEvicted,          // the Eviction API (kubectl drain) or the kubelet under node pressure
  kPreempted,        // the scheduler preempted the pod for one of higher priority
  kNodeLost,         // the node shut down, was lost or deleted, its pods garbage-collected
  kDeleted,          // the pod was deleted: by a user, or evicted on a cluster whose pods
                     // carry no DisruptionTarget condition (before Kubernetes 1.26)
  kOperatorRestart,  // the operator restarted the gang itself
  kFailed,           // the program failed: an exit code or a signal (OOM kill ...) of its own
  kStalled,          // the job's step stopped advancing (runPolicy.progressDeadlineSeconds)
  kResized,          // an elastic job's gang went on with fewer workers (spec.elasticPolicy);
                     // never counted, and no failure-policy rule names it
};
inline constexpr RestartCause kAllRestartCauses[] = {
    RestartCause::kEvicted, RestartCause::kPreempted,       RestartCause::kNodeLost,
    RestartCause::kDeleted, RestartCause::kOperatorRestart, RestartCause::kFailed,
    RestartCause::kStalled, RestartCause::kResized};
std::string ToString(RestartCause c);  // "Evicted", "Preempted", ... (the spec's spelling)
std::optional<RestartCause> ParseRestartCause(const std::string& s);

// What a failure of a cause does.
enum class FailureAction {
  kRestartJob,                       // restart the gang; counts against backoffLimit
  kRestartJobAndIgnoreBackoffLimit,  // restart the gang; does not count
  kFailJob,                          // fail the job at once
};
std::string ToString(FailureAction a);

struct FailurePolicyRule {
  std::string name;  // optional, for messages
  FailureAction action = FailureAction::kRestartJob;
  std::vector<RestartCause> on_causes;
};

// spec.failurePolicy.rules, in order: the first rule naming a cause decides; a cause that no
// rule names keeps its default (DefaultActionFor).
struct FailurePolicy {
  std::vector<FailurePolicyRule> rules;

  // The action for `cause`; `rule` (may be null) gets the deciding rule's name, or "default".
  FailureAction ActionFor(RestartCause cause, std::string* rule = nullptr) const;
};

// The defaults: a disruption that is not the program's fault (evicted, preempted, node lost,
// deleted, an operator restart) restarts without counting; a failure of the program counts,
// and so does a stall (a program that hangs every time must end, not loop).
FailureAction DefaultActionFor(RestartCause cause);

inline constexpr size_t kMaxFailurePolicyRules = 32;

// Parses spec.failurePolicy (null or absent: no rules). The error names the field.
StatusOr<FailurePolicy> ParseFailurePolicy(const nlohmann::json& spec);

// status.restarts: every gang restart, how many counted against backoffLimit, and by cause.
// A gang restarts by being made again (status.restartCount, the gang number, the pods'
// tjo.dev/restart-count) or in place (its pods kept, their containers restarted by the
// kubelet: docs/reliability.md, "In-place restarts"); the total is both.
struct RestartCounts {
  int32_t backoff_limit_used = 0;
  std::map<std::string, int32_t> by_cause;  // ToString(cause) -> gang restarts of that cause
  int32_t evaluator_backoff_limit_used = 0;
  int32_t in_place = 0;  // gang restarts in place, over the job's life
  // Of those, the current gang's (its pods' containers' restarts already counted).
  int32_t in_place_of_gang = 0;

  // Reads status.restarts; a status written before it existed (only restartCount and
  // evaluatorRestarts): every restart so far is taken as counted.
  static RestartCounts FromJson(const nlohmann::json& status, int32_t restart_count);
  // {total: `gangs_made_again` + in_place, backoffLimitUsed, byCause, inPlace, inPlaceOfGang,
  // evaluatorBackoffLimitUsed}.
  nlohmann::json ToJson(int32_t gangs_made_again) const;
};

}  // namespace tj::api
