// Goodput (operator/api/goodput.h): what restarts and waiting cost the job, kept in
// status.goodput as the other rules act. A restart charges its cause the work since the last
// backup (a gang Kueue stops backs up as it stops, so it charges none) and starts timing the
// recovery, which ends at the next gang's first step; the time queued in Kueue is counted
// apart (a recovery's timing starts again at the admission). The ratio is the time trained
// over the time since the job's creation, brought up to date whenever the status is written
// anyway. Part of the reconcile pass (reconciler_pass.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "kube/object_meta.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler_pass.h"

namespace tj::controller::reconcile {

namespace cond = api::condition;

namespace {

double SecondsBetween(kube::WallTime from, kube::WallTime to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

// Seconds to the millisecond: a status that says 12.345 s, not 12.345678901.
double Rounded(double seconds) { return std::round(seconds * 1000) / 1000; }

std::optional<kube::WallTime> TimeAt(const std::optional<std::string>& text) {
  return text ? kube::ParseTime(*text) : std::nullopt;
}

// status.progress.lastBackup, or an empty object.
nlohmann::json LastBackupOf(const nlohmann::json& progress) {
  using nlohmann::json;
  const json backup =
      progress.is_object() ? progress.value("lastBackup", json::object()) : json::object();
  return backup.is_object() ? backup : json::object();
}

// An integer field of status.progress (or of its lastBackup), if any.
std::optional<int64_t> CountAt(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

void Pass::NoteAdmitted() {
  const api::Condition* waiting = status_.Find(cond::kAdmitted);
  if (waiting == nullptr || waiting->status != "False") return;
  const std::optional<kube::WallTime> since = kube::ParseTime(waiting->last_transition_time);
  if (!since) return;
  api::Goodput& g = status_.goodput;
  g.queued_seconds = Rounded(g.queued_seconds + SecondsBetween(*since, observed_.now));
  // The wait was queued time: a recovery under way is timed from the admission on.
  if (g.recovering_since) g.recovering_since = kube::FormatTime(observed_.now);
}

void Pass::NoteTrainingStep(const GangCensus& census) {
  api::Goodput& g = status_.goodput;
  if (g.training_since || census.running != census.expected || !census.missing.empty()) return;
  auto it = observed_.trainer_status.find(PodName(ref_.name, spec_.ChiefType(), 0));
  if (it == observed_.trainer_status.end() || !it->second.is_object()) return;
  json at = json::object();
  if (!CopyStatusField(it->second, status_schema::kStep, at, "step") &&
      !CopyStatusField(it->second, status_schema::kGlobalStep, at, "step")) {
    return;  // a program that reports no step is not timed
  }
  g.training_since = kube::FormatTime(observed_.now);
  if (!g.time_to_first_step_seconds) {
    if (auto created =
            kube::ParseTime(kube::TextOf(kube::MetadataOf(observed_.job), "creationTimestamp"))) {
      g.time_to_first_step_seconds =
          Rounded(std::max(0.0, SecondsBetween(*created, observed_.now) - g.queued_seconds));
    }
  }
  if (g.recovering_cause) {
    if (auto since = TimeAt(g.recovering_since)) {
      api::GoodputLoss& loss = g.lost[*g.recovering_cause];
      loss.seconds = Rounded(loss.seconds + SecondsBetween(*since, observed_.now));
    }
    g.recovering_cause.reset();
    g.recovering_since.reset();
  }
}

void Pass::ChargeLostWork(const std::string& cause, bool lossless) {
  api::Goodput& g = status_.goodput;
  // A gang that failed before its first step: its recovery so far is its earlier cause's.
  if (g.recovering_cause) {
    if (auto since = TimeAt(g.recovering_since)) {
      api::GoodputLoss& earlier = g.lost[*g.recovering_cause];
      earlier.seconds = Rounded(earlier.seconds + SecondsBetween(*since, observed_.now));
    }
  }
  api::GoodputLoss& loss = g.lost[cause];
  loss.restarts += 1;
  if (g.training_since && !lossless) {
    TakeReportedBackup();  // the backup a stopped chief ended with is newer than any poll
    // The unsaved work is done again by the next gang.
    if (auto from = UnsavedSince()) {
      loss.seconds = Rounded(loss.seconds + SecondsBetween(*from, observed_.now));
    }
    const json backup = LastBackupOf(status_.progress);
    const auto reached = CountAt(status_.progress, "globalStep");
    const auto saved = CountAt(backup, "globalStep");
    if (reached && saved && *reached > *saved) loss.steps += *reached - *saved;
  }
  g.training_since.reset();
  g.recovering_cause = cause;
  g.recovering_since = kube::FormatTime(observed_.now);
}

std::optional<kube::WallTime> Pass::UnsavedSince() const {
  const std::optional<kube::WallTime> trained_from = TimeAt(status_.goodput.training_since);
  if (!trained_from) return std::nullopt;
  const json backup = LastBackupOf(status_.progress);
  if (auto t = kube::ParseTime(backup.is_object() ? kube::TextOf(backup, "time") : "")) {
    return std::max(*trained_from, *t);
  }
  return trained_from;
}

void Pass::UpdateGoodputRatio() {
  api::Goodput& g = status_.goodput;
  const auto created =
      kube::ParseTime(kube::TextOf(kube::MetadataOf(observed_.job), "creationTimestamp"));
  if (!created || !g.time_to_first_step_seconds) return;
  const kube::WallTime end = TimeAt(status_.completion_time).value_or(observed_.now);
  const double elapsed = SecondsBetween(*created, end);
  if (elapsed <= 0) return;
  double idle = g.queued_seconds + *g.time_to_first_step_seconds;
  for (const auto& [cause, loss] : g.lost) idle += loss.seconds;
  // Waiting for Kueue now: queued, not recovering (NoteAdmitted times a recovery from the
  // admission on).
  std::optional<kube::WallTime> waiting_since;
  if (const api::Condition* c = status_.Find(cond::kAdmitted);
      c != nullptr && c->status == "False") {
    waiting_since = kube::ParseTime(c->last_transition_time);
  }
  if (waiting_since) idle += SecondsBetween(*waiting_since, end);
  if (auto since = TimeAt(g.recovering_since)) {
    idle += SecondsBetween(*since, waiting_since ? std::min(*waiting_since, end) : end);
  }
  g.ratio = std::round(std::clamp((elapsed - idle) / elapsed, 0.0, 1.0) * 1000) / 1000;
}

}  // namespace tj::controller::reconcile
