// The job's life: its spec read, Created, suspend and resume, activeDeadlineSeconds, Running and
// the startup deadline, Succeeded and Failed, and what a finished job's spec asks
// (cleanPodPolicy, ttlSecondsAfterFinished). Part of the reconcile pass (reconciler_pass.h).
#include <string>
#include <utility>

#include "operator/controller/reconciler_pass.h"

namespace tj::controller::reconcile {

namespace cond = api::condition;

bool Pass::ParseSpecOrFail() {
  static const json kNoSpec;
  auto it = observed_.job.is_object() ? observed_.job.find("spec") : observed_.job.end();
  auto spec = api::ParseSpec(it != observed_.job.end() ? *it : kNoSpec);
  if (spec.ok()) {
    if (Status named = api::ValidateJobName(ref_.name, *spec); !named.ok()) spec = named;
  }
  if (spec.ok()) {
    spec_ = std::move(*spec);
    return true;
  }
  if (!status_.IsTrue(cond::kFailed)) {
    MarkFailed("InvalidSpec", "TrainingJob " + ref_.ns + "/" + ref_.name + " is invalid: " +
                                  spec.status().message() + "; fix the spec and re-create the job");
  }
  for (const auto& p : pods_) DeletePod(p);
  return false;
}

void Pass::MarkCreated() {
  if (status_.Find(cond::kCreated) != nullptr) return;
  status_.SetCondition(cond::kCreated, true, "JobCreated",
                       "TrainingJob " + ref_.name + " is created", observed_.now);
  decision_.job_created = true;
}

bool Pass::SuspendOrResume() {
  const kube::WallTime now = observed_.now;
  if (spec_.run_policy.suspend) {
    for (const auto& p : pods_) DeletePod(p);
    if (!status_.IsTrue(cond::kSuspended)) {
      status_.SetCondition(cond::kSuspended, true, "JobSuspended", "the job is suspended", now);
      status_.SetCondition(cond::kRunning, false, "JobSuspended", "the job is suspended", now);
      status_.SetCondition(cond::kRestarting, false, "JobSuspended", "the job is suspended", now);
      Event("Normal", "JobSuspended", "suspended: deleting its pods");
    }
    status_.created_generation = -1;
    status_.first_failure_time.reset();
    status_.progress_time.reset();
    status_.start_time.reset();
    status_.progress = nullptr;
    return true;
  }
  if (status_.IsTrue(cond::kSuspended)) {
    status_.SetCondition(cond::kSuspended, false, "JobResumed", "the job is resumed", now);
    Event("Normal", "JobResumed", "resumed: creating its pods");
  }
  return false;
}

bool Pass::FailPastActiveDeadline() {
  // activeDeadlineSeconds, from the start time, enforced by a requeue at the deadline.
  if (!spec_.run_policy.active_deadline_seconds) return false;
  auto start = kube::ParseTime(*status_.start_time);
  if (!start) return false;
  const auto deadline = *start + std::chrono::seconds(*spec_.run_policy.active_deadline_seconds);
  if (observed_.now < deadline) {
    RequeueAt(deadline);
    return false;
  }
  Fail("DeadlineExceeded", "the job ran longer than activeDeadlineSeconds=" +
                               std::to_string(*spec_.run_policy.active_deadline_seconds));
  return true;
}

bool Pass::SucceedOnceTrained(const Gang& gang, const GangCensus& census) {
  const bool trained = spec_.success_policy == api::SuccessPolicy::kChief
                           ? census.chief_succeeded
                           : (census.chief_succeeded || spec_.Replicas(ReplicaType::kChief) == 0) &&
                                 census.succeeded_workers == spec_.Replicas(ReplicaType::kWorker);
  if (!trained) return false;
  const FinalEvaluation evaluation = AwaitFinalEvaluation(gang, census);
  if (evaluation == FinalEvaluation::kAwaiting) return true;
  CopyProgress();
  if (evaluation == FinalEvaluation::kGraceExpired) {
    Succeed("training finished; the evaluator did not finish within " +
            std::to_string(options_.evaluator_grace.count() / 1000) + "s");
  } else {
    Succeed("TrainingJob " + ref_.name + " succeeded" +
            (status_.evaluation.is_object() && status_.evaluation.contains("accuracy")
                 ? ": test accuracy " + status_.evaluation["accuracy"].dump()
                 : ""));
  }
  return true;
}

bool Pass::MarkRunningOrFailStartup(const GangCensus& census) {
  if (census.running == census.expected && census.missing.empty()) {
    if (!status_.IsTrue(cond::kRunning)) {
      const std::string msg =
          "all " + std::to_string(census.expected) + " chief/worker pods are running";
      status_.SetCondition(cond::kRunning, true, "JobRunning", msg, observed_.now);
      status_.SetCondition(cond::kRestarting, false, "JobRunning", msg, observed_.now);
      Event("Normal", "JobRunning", msg);
    }
    return false;
  }
  if (!census.root_image.empty()) {
    // The operator's secure default (runAsNonRoot) meets an image whose user is root: the pod
    // can never start, so the job fails at once with how to opt out.
    Fail("ImageRunsAsRoot",
         "pod " + census.root_image +
             "; the image runs as root, which the pod's default securityContext.runAsNonRoot: "
             "true forbids: set securityContext: {runAsNonRoot: false} in the replica's pod "
             "template to allow it, or give the image a non-root USER");
    return true;
  }
  if (!spec_.run_policy.startup_deadline_seconds || !census.earliest_pending) return false;
  const auto deadline =
      *census.earliest_pending + std::chrono::seconds(*spec_.run_policy.startup_deadline_seconds);
  if (observed_.now < deadline) {
    RequeueAt(deadline);
    return false;
  }
  Fail("StartupDeadlineExceeded",
       "pod " + census.pending_pod + " was not running " +
           std::to_string(*spec_.run_policy.startup_deadline_seconds) + "s after it was created" +
           (census.pending_reason.empty() ? "" : " (" + census.pending_reason + ")"));
  return true;
}

void Pass::MarkFailed(const std::string& reason, const std::string& message) {
  const kube::WallTime now = observed_.now;
  status_.SetCondition(cond::kFailed, true, reason, message, now);
  status_.SetCondition(cond::kRunning, false, reason, message, now);
  status_.SetCondition(cond::kRestarting, false, reason, message, now);
  if (!status_.completion_time) status_.completion_time = kube::FormatTime(now);
  Event("Warning", reason, message);
  decision_.job_failed = true;
}

void Pass::Fail(const std::string& reason, const std::string& message) {
  MarkFailed(reason, message);
  CleanUp();
}

void Pass::Succeed(const std::string& message) {
  const kube::WallTime now = observed_.now;
  status_.SetCondition(cond::kSucceeded, true, "JobSucceeded", message, now);
  status_.SetCondition(cond::kRunning, false, "JobSucceeded", message, now);
  status_.SetCondition(cond::kRestarting, false, "JobSucceeded", message, now);
  if (!status_.completion_time) status_.completion_time = kube::FormatTime(now);
  Event("Normal", "JobSucceeded", message);
  decision_.job_succeeded = true;
  CleanUp();
}

void Pass::CleanUp() {
  const api::CleanPodPolicy policy = spec_.run_policy.clean_pod_policy;
  for (const auto& p : pods_) {
    if (policy == api::CleanPodPolicy::kAll ||
        (policy == api::CleanPodPolicy::kRunning && p.Active())) {
      DeletePod(p);
    }
  }
  if (!spec_.run_policy.ttl_seconds_after_finished || !status_.completion_time) return;
  auto done = kube::ParseTime(*status_.completion_time);
  if (!done) return;
  const auto expires = *done + std::chrono::seconds(*spec_.run_policy.ttl_seconds_after_finished);
  if (observed_.now >= expires) {
    Action a;
    a.kind = Action::Kind::kDeleteJob;
    a.resource = api::kTrainingJobs;
    a.name = ref_.name;
    decision_.actions.push_back(std::move(a));
  } else {
    RequeueAt(expires);
  }
}

}  // namespace tj::controller::reconcile
