// The evaluator: one pod beside the gang, outside it (a gang restart leaves it running), created
// when missing, restarted alone with its own backoff and its own share of backoffLimit; and,
// once training has succeeded, its final evaluation awaited for a bounded time.
// Part of the reconcile pass (reconciler_pass.h).
#include <string>

#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler_pass.h"

namespace tj::controller::reconcile {

namespace cond = api::condition;

void Pass::SuperviseEvaluator(const Gang& gang) {
  if (spec_.Replicas(ReplicaType::kEvaluator) == 0) return;
  const std::string name = PodName(ref_.name, ReplicaType::kEvaluator, 0);
  const api::ReplicaSpec& rs = spec_.replica_specs.at(ReplicaType::kEvaluator);
  if (gang.evaluator == nullptr) {
    CreatePod(ReplicaType::kEvaluator, 0, gang.number);
    return;
  }
  const PodView& evaluator = *gang.evaluator;
  if (evaluator.being_deleted || evaluator.phase != "Failed") return;
  PodOutcome o = OutcomeOf(evaluator);
  const int limit = spec_.run_policy.backoff_limit;
  // Its own share of backoffLimit, used as the failure policy says (an eviction: not).
  int32_t& used = status_.restarts.evaluator_backoff_limit_used;
  const bool counts = spec_.failure_policy.ActionFor(o.cause) !=
                      api::FailureAction::kRestartJobAndIgnoreBackoffLimit;
  if (IsRetryable(rs.restart_policy, o) && (!counts || used < limit)) {
    // Its own backoff (base * 2^restarts from when it ended), its own share of backoffLimit.
    const milliseconds backoff = RestartBackoff(status_.evaluator_restarts);
    std::optional<kube::WallTime> ended;
    if (evaluator.trainer_terminated) ended = evaluator.trainer_terminated->finished_at;
    const kube::WallTime ready_at = ended.value_or(observed_.now) + backoff;
    if (observed_.now < ready_at) {
      RequeueAt(ready_at);
      return;
    }
    status_.evaluator_restarts += 1;
    if (counts) used += 1;
    Event("Warning", "EvaluatorRestart",
          Describe(name, o) + "; restarting the evaluator (" +
              (counts ? std::to_string(used) + " of " + std::to_string(limit)
                      : api::ToString(o.cause) + ", not counted against backoffLimit") +
              ")");
    DeletePod(evaluator);
  } else if (IsRetryable(rs.restart_policy, o) && used == limit) {
    used += 1;  // said once
    Event("Warning", "EvaluatorGaveUp",
          Describe(name, o) + "; not restarted: backoffLimit " + std::to_string(limit) +
              " reached. Training goes on without evaluations");
  }
}

Pass::FinalEvaluation Pass::AwaitFinalEvaluation(const Gang& gang, const GangCensus& census) {
  if (gang.evaluator == nullptr || !gang.evaluator->Active()) return FinalEvaluation::kNotAwaited;
  const kube::WallTime since = census.chief_finished.value_or(observed_.now);
  const auto until = since + options_.evaluator_grace;
  if (observed_.now >= until) return FinalEvaluation::kGraceExpired;
  status_.SetCondition(cond::kRunning, true, "WaitingForEvaluator",
                       "training finished; waiting for the evaluator's final evaluation",
                       observed_.now);
  CopyProgress();
  RequeueAt(until);
  RequeueAfter(options_.progress_poll);
  return FinalEvaluation::kAwaiting;
}

}  // namespace tj::controller::reconcile
