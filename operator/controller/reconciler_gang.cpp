// The gang: the chief and worker pods of one gang number (status.restartCount), sorted from the
// stale ones and counted; the missing ones created once the previous gang is gone and the
// restart backoff has passed; a failure failing the job or restarting the whole gang, charged as
// spec.failurePolicy says. Part of the reconcile pass (reconciler_pass.h).
#include <algorithm>
#include <string>

#include "common/backoff.h"
#include "common/utf8.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler_pass.h"
#include "operator/controller/restart_cause.h"

namespace tj::controller {
namespace cond = api::condition;

namespace reconcile {
namespace {

// How many pods a message names before it counts the rest.
constexpr size_t kNamedConsequences = 4;

// The kubelet's message when a pod's securityContext says runAsNonRoot and the image's user is
// root (or not numeric): the container never starts, and waiting does not help. "" otherwise.
std::string RootImageMessage(const PodView& pod) {
  for (const WaitingContainer& w : pod.waiting) {
    if (w.reason == "CreateContainerConfigError" &&
        w.message.find("runAsNonRoot") != std::string::npos) {
      return Utf8Prefix(w.message, 512);
    }
  }
  return "";
}

}  // namespace

Pass::Gang Pass::SortPodsAndDeleteStale() {
  Gang g;
  g.number = status_.restart_count;
  for (const PodView& p : pods_) {
    const std::optional<ReplicaType> t = p.replica_type;
    const int index = p.replica_index;
    const bool in_spec = t && index >= 0 && index < spec_.Replicas(*t);
    if (!t && p.probe_index >= 0) {
      g.probes.push_back(&p);  // GrowWhenThereIsRoom keeps or deletes them
    } else if (in_spec && *t == ReplicaType::kEvaluator && g.evaluator == nullptr) {
      g.evaluator = &p;
    } else if (!in_spec || *t == ReplicaType::kEvaluator || p.gang != g.number) {
      g.stale.push_back(&p);  // outside the spec, a second evaluator, or of an earlier gang
    } else {
      g.current[{*t, index}] = &p;
    }
  }
  for (const PodView* p : g.stale) DeletePod(*p);
  return g;
}

Pass::GangCensus Pass::TakeCensus(const Gang& gang) const {
  GangCensus c;
  const ReplicaType chief_type = spec_.ChiefType();
  for (ReplicaType t : {ReplicaType::kChief, ReplicaType::kWorker}) {
    if (!spec_.replica_specs.contains(t)) continue;
    const api::ReplicaSpec& rs = spec_.replica_specs.at(t);
    for (int i = 0; i < rs.replicas; ++i) {
      ++c.expected;
      const std::string name = PodName(ref_.name, t, i);
      auto it = gang.current.find({t, i});
      const PodView* found = it != gang.current.end() ? it->second : nullptr;
      bool gone = false;
      if (found == nullptr && status_.created_generation == gang.number) {
        found = DepartedPod(name, gang.number);  // gone, as it last looked
        gone = true;
        if (found == nullptr) {
          PodOutcome o;
          o.failed = o.deleted = true;
          o.cause = api::RestartCause::kDeleted;
          c.failures.push_back({name, o, true, rs.restart_policy, std::nullopt});  // gone: first
          continue;
        }
      }
      if (found == nullptr) {
        c.missing.emplace_back(t, i);
        continue;
      }
      const PodView& pod = *found;
      const std::string& phase = pod.phase;
      const std::optional<TerminatedContainer>& ended = pod.trainer_terminated;
      // A trainer that exited 0 has finished its training, whatever happens to its pod later
      // (deleted after it exited, or while it wrote its last files: its SIGTERM then waits).
      const bool succeeded =
          phase == "Succeeded" || (pod.being_deleted && ended && ended->exit_code == 0);
      if (!succeeded && (pod.being_deleted || phase == "Failed")) {
        PodOutcome o = OutcomeOf(pod);
        // When it ended: a deleted pod when it was deleted (its trainer's exit follows), else
        // when its trainer exited.
        std::optional<kube::WallTime> at = ended ? ended->finished_at : std::nullopt;
        if (pod.deleted_at && (!at || *pod.deleted_at < *at)) at = pod.deleted_at;
        c.failures.push_back({name, o, IsRetryable(rs.restart_policy, o), rs.restart_policy, at});
        if (phase != "Failed" && !ended && !gone) c.still_running.push_back(name);
      } else if (succeeded) {
        ++c.running;
        if (t == ReplicaType::kWorker) ++c.succeeded_workers;
        if (t == chief_type && i == 0) {
          c.chief_succeeded = true;
          if (pod.trainer_terminated) c.chief_finished = pod.trainer_terminated->finished_at;
        }
      } else if (phase == "Running") {
        ++c.running;
        c.still_running.push_back(name);
      } else {
        if (c.root_image.empty()) {
          if (std::string m = RootImageMessage(pod); !m.empty()) c.root_image = name + ": " + m;
        }
        const std::optional<kube::WallTime>& created = pod.created;
        if (created && (!c.earliest_pending || *created < *c.earliest_pending)) {
          c.earliest_pending = created;
          c.pending_pod = name;
          c.pending_reason = pod.PendingReason();
        }
      }
    }
  }
  return c;
}

const PodView* Pass::DepartedPod(const std::string& name, int gang) const {
  for (const PodView& p : observed_.departed) {
    if (p.name == name && p.gang == gang) return &p;
  }
  return nullptr;
}

void Pass::NoteWholeGangCreated(const Gang& gang, const GangCensus& census) {
  // An operator that stopped with the creating pass's status kept back (executor.h) left the
  // status behind the pods: they are the truth.
  if (!census.missing.empty()) return;
  status_.created_generation = gang.number;
  NotePodsCreated();
}

void Pass::NotePodsCreated() {
  // Written only when every create of the pass is accepted: the executor writes
  // PodCreateRefused itself when one is not.
  status_.SetCondition(cond::kPodCreateRefused, false, "PodsCreated",
                       "the API server accepted the job's pods", observed_.now);
}

bool Pass::FailOrRestartGang(const Gang& gang, const GangCensus& census) {
  if (census.failures.empty()) {
    status_.first_failure_time.reset();  // a pod that looked gone has exited 0 meanwhile
    return false;
  }
  if (WaitForTheGangToEnd(census)) return true;
  // In the order they happened; a pod that is gone went first. Within the kubelet's
  // one-second resolution a retryable failure explains the rest (RootCauseRank), and a
  // non-retryable one comes last: a peer's loss makes every survivor fail, whatever it exits
  // with, while a program error that happened at the same moment shows again in the next gang.
  std::vector<const Failure*> order;
  for (const Failure& f : census.failures) order.push_back(&f);
  auto tie_rank = [](const Failure* f) {
    return f->retryable ? RootCauseRank(f->outcome.cause, f->outcome.exit_code == 75) : 3;
  };
  std::stable_sort(order.begin(), order.end(), [&](const Failure* a, const Failure* b) {
    if (a->at != b->at) return !a->at || (b->at && *a->at < *b->at);
    return tie_rank(a) < tie_rank(b);
  });
  const Failure& cause = *order.front();
  const std::string then = Consequences(order, 1);
  if (!cause.retryable) {
    Fail(cause.policy == api::RestartPolicy::kNever ? "PodFailed" : "NonRetryableExitCode",
         Describe(cause.pod, cause.outcome) + ", which restartPolicy " +
             api::ToString(cause.policy) + " does not retry" + then);
    return true;
  }
  const std::string why = Describe(cause.pod, cause.outcome);
  auto budget = ChargeGangRestart(cause.outcome.cause, why + then);
  if (!budget) return true;  // the job has failed
  RestartGang("restart " + std::to_string(status_.restart_count + 1) + " (" + *budget +
                  "): " + why + then + "; restarting all chief and worker pods",
              gang.current);
  return true;
}

bool Pass::ChargeInPlaceRestarts(const Gang& gang) {
  int most = 0;
  const PodView* restarted = nullptr;
  ReplicaType type = ReplicaType::kWorker;
  for (const auto& [replica, pod] : gang.current) {
    if (pod->trainer_restarts > most) {
      most = pod->trainer_restarts;
      restarted = pod;
      type = replica.first;
    }
  }
  int32_t& counted = status_.restarts.in_place_of_gang;
  if (restarted == nullptr || most <= counted) return false;
  const std::string policy = api::ToString(spec_.replica_specs.at(type).restart_policy);
  while (counted < most) {
    const std::string why = "the kubelet restarted the gang's containers in place (" +
                            restarted->name + "'s trainer restarted " +
                            std::to_string(counted + 1) + (counted == 0 ? " time" : " times") +
                            "): a trainer exited with a code restartPolicy " + policy + " retries";
    auto budget = ChargeGangRestart(api::RestartCause::kFailed, why);
    if (!budget) {
      for (const auto& [replica, pod] : gang.current) DeletePod(*pod);
      return true;
    }
    counted += 1;
    status_.restarts.in_place += 1;
    Event("Warning", "GangRestartedInPlace",
          "restart in place " + std::to_string(status_.restarts.in_place) + " (" + *budget +
              "): " + why);
  }
  status_.progress_time.reset();  // the restarted gang is judged afresh
  CopyProgress();
  return false;
}

std::string Pass::Consequences(const std::vector<const Failure*>& order, size_t from) {
  std::string then;
  for (size_t i = from; i < order.size() && i < from + kNamedConsequences; ++i) {
    then += (then.empty() ? "; then " : ", ") + Describe(order[i]->pod, order[i]->outcome);
  }
  if (order.size() > from + kNamedConsequences) {
    then += " and " + std::to_string(order.size() - from - kNamedConsequences) + " more";
  }
  return then;
}

bool Pass::WaitForTheGangToEnd(const GangCensus& census) {
  if (census.still_running.empty() || options_.failure_settle <= milliseconds(0)) return false;
  std::optional<kube::WallTime> since =
      status_.first_failure_time ? kube::ParseTime(*status_.first_failure_time) : std::nullopt;
  if (!since) {
    since = observed_.now;
    status_.first_failure_time = kube::FormatTime(observed_.now);
    std::string running;
    for (size_t i = 0; i < census.still_running.size() && i < kNamedConsequences; ++i) {
      running += (running.empty() ? "" : ", ") + census.still_running[i];
    }
    if (census.still_running.size() > kNamedConsequences) {
      running +=
          " and " + std::to_string(census.still_running.size() - kNamedConsequences) + " more pods";
    }
    const Failure& seen = census.failures.front();
    Event("Normal", "GangFailing",
          Describe(seen.pod, seen.outcome) + "; waiting up to " +
              std::to_string(options_.failure_settle.count() / 1000) + "s for " + running +
              " to end before deciding: the failure that came first decides");
  }
  const kube::WallTime deadline = *since + options_.failure_settle;
  if (observed_.now >= deadline) return false;
  RequeueAt(deadline);  // each pod's end also brings a pass
  return true;
}

std::optional<std::string> Pass::ChargeGangRestart(api::RestartCause cause, const std::string& why,
                                                   bool never_counted) {
  std::string rule;
  const api::FailureAction action = never_counted
                                        ? api::FailureAction::kRestartJobAndIgnoreBackoffLimit
                                        : spec_.failure_policy.ActionFor(cause, &rule);
  const std::string name = api::ToString(cause);
  const int limit = spec_.run_policy.backoff_limit;
  int32_t& used = status_.restarts.backoff_limit_used;
  if (action == api::FailureAction::kFailJob) {
    Fail("FailurePolicy", why + "; cause " + name + ": " + rule + " fails the job");
    return std::nullopt;
  }
  const bool counts = action == api::FailureAction::kRestartJob;
  if (counts && used >= limit) {
    Fail("BackoffLimitExceeded", why + "; the gang was restarted " +
                                     std::to_string(status_.restart_count) + " times, " +
                                     std::to_string(used) + " of them counted (backoffLimit " +
                                     std::to_string(limit) + ")");
    return std::nullopt;
  }
  ChargeLostWork(name, /*lossless=*/never_counted);
  status_.restarts.by_cause[name] += 1;
  if (!counts) return name + ", not counted against backoffLimit " + std::to_string(limit);
  used += 1;
  return name + ", " + std::to_string(used) + " of backoffLimit " + std::to_string(limit);
}

void Pass::RestartGang(const std::string& message, const GangPods& current,
                       const std::string& reason, bool restarting) {
  status_.restart_count += 1;
  status_.restarts.in_place_of_gang = 0;  // the new gang's pods start with no restarts
  status_.created_generation = -1;
  status_.first_failure_time.reset();
  status_.progress_time.reset();
  if (spec_.elastic) status_.elastic_workers = spec_.elastic->max_replicas;
  status_.SetCondition(cond::kRestarting, restarting, reason, message, observed_.now);
  status_.SetCondition(cond::kRunning, false, reason, message, observed_.now);
  Event("Warning", reason, message);
  decision_.job_restarted = true;
  for (const auto& [replica, pod] : current) DeletePod(*pod);
  RequeueAfter(std::chrono::seconds(1));
  CopyProgress();
}

bool Pass::RestartIfStalled(const Gang& gang, const GangCensus& census) {
  const std::optional<int64_t> limit = spec_.run_policy.progress_deadline_seconds;
  if (!limit || census.running != census.expected || !census.missing.empty()) return false;
  const std::string chief = PodName(ref_.name, spec_.ChiefType(), 0);
  // Where the chief is: {epoch, step} (its step counts within the epoch); null when it did not
  // answer or reports no step.
  json at;
  if (auto it = observed_.trainer_status.find(chief);
      it != observed_.trainer_status.end() && it->second.is_object()) {
    json p = json::object();
    CopyStatusField(it->second, status_schema::kEpoch, p, "epoch");
    if (CopyStatusField(it->second, status_schema::kStep, p, "step")) at = std::move(p);
  }
  json was = json::object();  // where it was at the last pass (status.progress)
  if (status_.progress.is_object()) {
    for (const char* k : {"epoch", "step"}) {
      if (status_.progress.contains(k)) was[k] = status_.progress[k];
    }
  }
  if (at.is_null() && !status_.progress_time) return false;  // no step reported: not judged
  const std::optional<kube::WallTime> since =
      status_.progress_time ? kube::ParseTime(*status_.progress_time) : std::nullopt;
  if (!since || (!at.is_null() && at != was)) {  // first seen, or advanced
    status_.progress_time = kube::FormatTime(observed_.now);
    RequeueAt(observed_.now + std::chrono::seconds(*limit));
    return false;
  }
  const kube::WallTime deadline = *since + std::chrono::seconds(*limit);
  if (observed_.now < deadline) {
    RequeueAt(deadline);
    return false;
  }
  const std::string why =
      "the step stayed at " + was.dump() + " for " + std::to_string(*limit) +
      "s (runPolicy.progressDeadlineSeconds; " + chief +
      (at.is_null() ? " has stopped answering GET /status" : "'s /status") +
      "): in synchronous training every replica waits for the slowest, whose log says why";
  Event("Warning", "Stalled", why);
  auto budget = ChargeGangRestart(api::RestartCause::kStalled, why);
  if (!budget) return true;  // the job has failed
  RestartGang("restart " + std::to_string(status_.restart_count + 1) + " (" + *budget +
                  "): " + why + "; restarting all chief and worker pods",
              gang.current);
  return true;
}

void Pass::CreateMissingPods(const Gang& gang, const GangCensus& census) {
  if (census.missing.empty()) return;
  const int number = gang.number;
  const bool old_gang_left =
      std::any_of(gang.stale.begin(), gang.stale.end(),
                  [](const PodView* p) { return p->replica_type != ReplicaType::kEvaluator; });
  std::optional<kube::WallTime> ready_at;
  const api::Condition* restarting = status_.Find(cond::kRestarting);
  if (number > 0 && restarting != nullptr && restarting->status == "True") {
    // lastUpdateTime: restarts in a row keep the condition True but change its message.
    auto since =
        kube::ParseTime(restarting->last_update_time.empty() ? restarting->last_transition_time
                                                             : restarting->last_update_time);
    if (since) ready_at = *since + RestartBackoff(number - 1);
  }
  if (old_gang_left) {
    RequeueAfter(std::chrono::seconds(1));  // deletions also trigger a pass
  } else if (ready_at && observed_.now < *ready_at) {
    RequeueAt(*ready_at);
  } else if (GroupTheGang(number)) {
    const bool in_place = GangRestartsInPlace(gang);
    std::string names;
    for (const auto& [t, i] : census.missing) {
      CreatePod(t, i, number, in_place);
      names += (names.empty() ? "" : ", ") + PodName(ref_.name, t, i);
    }
    status_.created_generation = number;
    NotePodsCreated();
    Event("Normal", "CreatedPods",
          "created " + names + (number > 0 ? " (restart " + std::to_string(number) + ")" : ""));
  }
}

bool Pass::GangRestartsInPlace(const Gang& gang) const {
  if (!options_.restart_in_place) return false;
  if (!gang.current.empty()) return gang.current.begin()->second->restarts_in_place;
  return ChooseInPlace(observed_.in_place_nodes).on;
}

std::chrono::milliseconds Pass::RestartBackoff(int doublings) const {
  return std::chrono::duration_cast<milliseconds>(ExponentialDelay(
      options_.restart_backoff_base, options_.restart_backoff_max, 2.0, std::max(doublings, 0)));
}

}  // namespace reconcile

PodOutcome OutcomeOf(const PodView& pod) {
  PodOutcome o;
  o.cause = ClassifyRestartCause(pod);
  o.failed = pod.phase == "Failed" || pod.being_deleted;
  // A disruption (DisruptionTarget, else the status reason of one): not the trainer's doing.
  o.deleted = pod.being_deleted || !pod.disruption.empty() || pod.reason == "Evicted" ||
              pod.reason == "Preempting" || pod.reason == "Shutdown";
  o.reason = pod.reason;
  if (pod.trainer_terminated) {
    o.exit_code = pod.trainer_terminated->exit_code;
    if (o.reason.empty()) o.reason = pod.trainer_terminated->reason;
  }
  return o;
}

bool IsRetryable(api::RestartPolicy policy, const PodOutcome& o) {
  if (o.deleted) return true;  // not the trainer's fault: restart under every policy
  switch (policy) {
    case api::RestartPolicy::kNever:
      return false;
    case api::RestartPolicy::kOnFailure:
    case api::RestartPolicy::kAlways:
      return true;
    case api::RestartPolicy::kExitCode:
      // Signals (128+n), the trainer's "peer lost" (75); no exit code: the node lost it.
      return !o.exit_code || *o.exit_code >= 128 || *o.exit_code == 75;
  }
  return false;
}

std::string Describe(const std::string& pod, const PodOutcome& o) {
  // How a pod that did not end on its own went: its cause's word (DisruptionTarget's reason).
  const std::string gone = o.cause == api::RestartCause::kEvicted     ? "evicted"
                           : o.cause == api::RestartCause::kPreempted ? "preempted"
                                                                      : "deleted";
  if (o.reason == "Evicted") return "pod " + pod + " was evicted";
  if (o.deleted && !o.exit_code) return "pod " + pod + " was " + gone;
  std::string s = "pod " + pod;
  if (o.exit_code) {
    s += " exited with code " + std::to_string(*o.exit_code);
    if (*o.exit_code > 128) s += " (signal " + std::to_string(*o.exit_code - 128) + ")";
    // The trainer exits 75 when it lost a peer, and after stopping on its pod's SIGTERM.
    if (*o.exit_code == 75) s += o.deleted ? " (stopped on SIGTERM)" : " (peer lost)";
  } else {
    s += " failed";
  }
  if (!o.reason.empty() && o.reason != "Error" && o.reason != "Completed") {
    s += " (" + o.reason + ")";
  }
  if (o.deleted) s += " and was " + gone;
  return s;
}

}  // namespace tj::controller
