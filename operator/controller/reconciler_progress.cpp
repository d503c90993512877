// Progress: status.progress copied from the chief's /status answer (the tenant's: only values of
// the schema's kinds, common/status_schema.h), status.evaluation from the evaluator's, the
// Running condition's note when the chief never answers, and status.replicaStatuses.
// Part of the reconcile pass (reconciler_pass.h).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status_schema.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler_pass.h"

namespace tj::controller {

using nlohmann::json;
namespace cond = api::condition;

namespace reconcile {
namespace {

// How long a running gang may go without one /status answer from its chief before the Running
// condition says so (a program's first answer comes once it has loaded its data).
constexpr std::chrono::seconds kNoStatusGrace{60};
constexpr char kNoStatusSuffix[] =
    "; the chief has not answered GET /status on $TJ_STATUS_PORT, so status.progress stays "
    "empty (serving it is optional: docs/tfjob.md)";

}  // namespace

void Pass::CountReplicas() {
  std::map<std::string, api::ReplicaStatus> out;
  for (const auto& [t, rs] : spec_.replica_specs) out[api::ToString(t)] = {};
  std::vector<const PodView*> pods;
  for (const auto& p : pods_) pods.push_back(&p);
  for (const auto& p : created_pods_) pods.push_back(&p);
  for (const PodView* pod : pods) {
    const PodView& p = *pod;
    const std::optional<ReplicaType> t = p.replica_type;
    if (!t || !out.contains(api::ToString(*t))) continue;
    if (*t != ReplicaType::kEvaluator && p.gang != status_.restart_count) {
      continue;  // a pod of an earlier gang
    }
    api::ReplicaStatus& s = out[api::ToString(*t)];
    if (p.phase == "Succeeded") {
      ++s.succeeded;
    } else if (p.phase == "Failed") {
      ++s.failed;
    } else if (p.Active()) {
      ++s.active;
    }
  }
  status_.replica_statuses = out;
}

void Pass::CopyProgress() {
  auto it = observed_.trainer_status.find(PodName(ref_.name, spec_.ChiefType(), 0));
  if (it != observed_.trainer_status.end() && it->second.is_object()) {
    const json& s = it->second;
    json p = json::object();
    namespace k = status_schema;
    CopyStatusField(s, k::kEpoch, p, "epoch");
    CopyStatusField(s, k::kTotalEpochs, p, "totalEpochs");
    CopyStatusField(s, k::kStep, p, "step");
    CopyStatusField(s, k::kGlobalStep, p, "globalStep");
    CopyStatusField(s, k::kLoss, p, "loss");
    CopyStatusField(s, k::kAccuracy, p, "accuracy");
    CopyStatusField(s, k::kImagesPerSec, p, "imagesPerSecond");
    if (s.contains(k::kLastBackup.key)) {  // {epoch, step} of the newest backup
      json b = json::object();
      CopyStatusField(s[k::kLastBackup.key], k::kEpoch, b, "epoch");
      CopyStatusField(s[k::kLastBackup.key], k::kStep, b, "step");
      CopyStatusField(s[k::kLastBackup.key], k::kGlobalStep, b, "globalStep");
      if (!b.empty()) {
        // When the operator first saw it (within one progress poll of its write): what a
        // scheduler weighs to preempt the job that loses least (docs/kueue.md).
        const json was = status_.progress.is_object()
                             ? status_.progress.value("lastBackup", json::object())
                             : json::object();
        const bool same = was.is_object() &&
                          was.value("epoch", json()) == b.value("epoch", json()) &&
                          was.value("step", json()) == b.value("step", json()) &&
                          was.contains("time") && was["time"].is_string();
        b["time"] = same ? was["time"] : json(kube::FormatTime(observed_.now));
        p["lastBackup"] = b;
      }
    }
    if (!p.empty()) {
      // A gang that has not saved yet still resumes from the newest backup there is.
      const json was =
          status_.progress.is_object() ? status_.progress.value("lastBackup", json()) : json();
      status_.progress = p;
      if (!was.is_null()) TakeNewerBackup(status_.progress, was);
    }
  }
  // What a chief that stopped reported as it ended: newer than any poll of it.
  for (const json& reported : {NewestReportedBackup(pods_), observed_.reported_backup}) {
    if (!reported.is_null()) TakeNewerBackup(status_.progress, reported);
  }
  NoteMissingStatus(it != observed_.trainer_status.end());
  auto take_eval = [&](const json& e) {
    if (!e.is_object()) return;
    json v = json::object();
    namespace k = status_schema;
    CopyStatusField(e, k::kCheckpoint, v, "checkpoint");
    if (!v.contains("checkpoint")) return;
    CopyStatusField(e, k::kEpoch, v, "epoch");
    CopyStatusField(e, k::kLoss, v, "loss");
    CopyStatusField(e, k::kAccuracy, v, "accuracy");
    status_.evaluation = v;
  };
  const std::string eval_pod = PodName(ref_.name, ReplicaType::kEvaluator, 0);
  if (auto e = observed_.trainer_status.find(eval_pod); e != observed_.trainer_status.end()) {
    if (e->second.is_object() && e->second.contains(status_schema::kEvaluation.key))
      take_eval(e->second[status_schema::kEvaluation.key]);
  }
  if (auto e = observed_.final_evaluation.find(eval_pod); e != observed_.final_evaluation.end()) {
    take_eval(e->second);
  }
}

// A program need not serve /status (docs/tfjob.md), but an empty status.progress should say
// why. Once the gang has run for kNoStatusGrace without a single answer from the chief, the
// Running condition's message says so; it is written once (the message then stays as it is)
// and goes away with the first answer. A job that has reported progress once is never told.
void Pass::NoteMissingStatus(bool chief_answered) {
  const api::Condition* running = status_.Find(cond::kRunning);
  if (running == nullptr || running->status != "True" || running->reason != "JobRunning") return;
  const std::string base = running->message.substr(0, running->message.find(kNoStatusSuffix));
  std::string message = base;
  if (!chief_answered && status_.progress.is_null()) {
    const auto since = kube::ParseTime(running->last_transition_time);
    if (!since) return;
    if (observed_.now < *since + kNoStatusGrace) {
      RequeueAt(*since + kNoStatusGrace);
      return;
    }
    message = base + kNoStatusSuffix;
  }
  if (message != running->message) {
    status_.SetCondition(cond::kRunning, true, "JobRunning", message, observed_.now);
  }
}

}  // namespace reconcile

json NewestReportedBackup(const std::vector<PodView>& pods) {
  json newest;
  for (const PodView& p : pods) {
    if (!p.trainer_terminated || p.trainer_terminated->last_backup.is_null()) continue;
    const json& b = p.trainer_terminated->last_backup;
    if (newest.is_null() ||
        std::pair(b["epoch"].get<int64_t>(), b["step"].get<int64_t>()) >
            std::pair(newest["epoch"].get<int64_t>(), newest["step"].get<int64_t>())) {
      newest = b;
    }
  }
  return newest;
}

bool TakeNewerBackup(json& progress, const json& backup) {
  auto count = [](const json& o, const char* key) -> std::optional<int64_t> {
    if (!o.is_object()) return std::nullopt;
    auto it = o.find(key);
    if (it == o.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
  };
  const auto epoch = count(backup, "epoch"), step = count(backup, "step");
  if (!epoch || !step) return false;
  if (!progress.is_object()) progress = json::object();
  const json was = progress.value("lastBackup", json());
  const auto was_epoch = count(was, "epoch"), was_step = count(was, "step");
  if (was_epoch && was_step && std::pair(*was_epoch, *was_step) >= std::pair(*epoch, *step)) {
    return false;
  }
  json b = {{"epoch", *epoch}, {"step", *step}};
  if (const auto global = count(backup, "globalStep")) b["globalStep"] = *global;
  if (backup.contains("time") && backup["time"].is_string()) b["time"] = backup["time"];
  progress["lastBackup"] = std::move(b);
  return true;
}

json CopiedTrainerStatus(const json& answer) {
  namespace k = status_schema;
  json out = json::object();
  for (const k::Field& f :
       {k::kEpoch, k::kTotalEpochs, k::kStep, k::kLoss, k::kAccuracy, k::kImagesPerSec}) {
    CopyStatusField(answer, f, out, f.key);
  }
  auto copy_object = [&](const k::Field& object, std::initializer_list<k::Field> fields) {
    if (!answer.is_object() || !answer.contains(object.key)) return;
    json o = json::object();
    for (const k::Field& f : fields) CopyStatusField(answer[object.key], f, o, f.key);
    if (!o.empty()) out[object.key] = std::move(o);
  };
  copy_object(k::kLastBackup, {k::kEpoch, k::kStep});
  copy_object(k::kEvaluation, {k::kCheckpoint, k::kEpoch, k::kLoss, k::kAccuracy});
  return out;
}

bool CopyStatusField(const json& from, status_schema::Field field, json& to, const char* to_key) {
  if (!from.is_object()) return false;
  const auto it = from.find(field.key);
  if (it == from.end()) return false;
  bool ok = false;
  switch (field.kind) {
    case status_schema::Kind::kCount:
      ok = (it->is_number_unsigned() && it->get<uint64_t>() <= INT32_MAX) ||
           (it->is_number_integer() && it->get<int64_t>() >= 0 && it->get<int64_t>() <= INT32_MAX);
      break;
    case status_schema::Kind::kNumber:
      ok = it->is_number();
      break;
    case status_schema::Kind::kText:
      ok = it->is_string() &&
           it->get_ref<const std::string&>().size() <= status_schema::kMaxTextBytes;
      break;
    case status_schema::Kind::kInfo:
    case status_schema::Kind::kObject:
      break;  // not copied as a value: an object's fields are copied one by one
  }
  if (ok) to[to_key] = *it;
  return ok;
}

}  // namespace tj::controller
