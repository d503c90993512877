#include "operator/api/training_job.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "common/utf8.h"
#include "kube/object_meta.h"

namespace tj::api {
namespace {

using nlohmann::json;

Status FieldError(const std::string& field, const std::string& what) {
  return Status::Error(field + ": " + what);
}

// Reads an optional integer field of `obj` into `out`, within [min, max].
Status ReadInt(const json& obj, const std::string& key, const std::string& path, int64_t min,
               int64_t max, std::optional<int64_t>* out) {
  if (!obj.contains(key) || obj[key].is_null()) return Status::Ok();
  const json& v = obj[key];
  if (!v.is_number_integer()) return FieldError(path + "." + key, "must be an integer");
  // get<int64_t>() of an unsigned value over INT64_MAX would wrap to a negative number.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return FieldError(path + "." + key, "must be <= " + std::to_string(max));
  }
  const int64_t n = v.get<int64_t>();
  if (n < min) return FieldError(path + "." + key, "must be >= " + std::to_string(min));
  if (n > max) return FieldError(path + "." + key, "must be <= " + std::to_string(max));
  *out = n;
  return Status::Ok();
}

// Reads an optional duration in seconds, at least `min`. Any larger integer is accepted and
// saturated to kMaxDurationSeconds ("never"), so that adding it to a time cannot wrap the clock;
// a value over INT64_MAX (which JSON allows) saturates too.
Status ReadDurationSeconds(const json& obj, const std::string& key, const std::string& path,
                           int64_t min, std::optional<int64_t>* out) {
  if (!obj.contains(key) || obj[key].is_null()) return Status::Ok();
  const json& v = obj[key];
  if (!v.is_number_integer()) {
    return FieldError(path + "." + key, "must be an integer number of seconds");
  }
  if (v.is_number_unsigned()) {
    *out = std::min<uint64_t>(v.get<uint64_t>(), kMaxDurationSeconds);
    if (**out < min) return FieldError(path + "." + key, "must be >= " + std::to_string(min));
    return Status::Ok();
  }
  const int64_t n = v.get<int64_t>();
  if (n < min) return FieldError(path + "." + key, "must be >= " + std::to_string(min));
  *out = std::min(n, kMaxDurationSeconds);
  return Status::Ok();
}

Status ReadEnum(const json& obj, const std::string& key, const std::string& path,
                const std::vector<std::string>& allowed, std::optional<std::string>* out) {
  if (!obj.contains(key) || obj[key].is_null()) return Status::Ok();
  const json& v = obj[key];
  std::string all;
  for (const auto& a : allowed) {
    if (!a.empty()) all += (all.empty() ? "" : ", ") + a;  // "" (unset) is not listed
  }
  if (!v.is_string()) return FieldError(path + "." + key, "must be one of " + all);
  for (const auto& a : allowed) {
    if (v.get<std::string>() == a) {
      *out = a;
      return Status::Ok();
    }
  }
  return FieldError(path + "." + key,
                    "unsupported value \"" + v.get<std::string>() + "\": must be one of " + all);
}

Status ValidateTemplate(const json& tmpl, const std::string& path) {
  if (!tmpl.is_object()) return FieldError(path, "required: a pod template with spec.containers");
  if (!tmpl.contains("spec") || !tmpl["spec"].is_object()) {
    return FieldError(path + ".spec", "required: a pod spec with containers");
  }
  const json& spec = tmpl["spec"];
  if (!spec.contains("containers") || !spec["containers"].is_array() ||
      spec["containers"].empty()) {
    return FieldError(path + ".spec.containers", "must list at least one container");
  }
  bool has_trainer = false;
  for (size_t i = 0; i < spec["containers"].size(); ++i) {
    const json& c = spec["containers"][i];
    const std::string cp = path + ".spec.containers[" + std::to_string(i) + "]";
    if (!c.is_object()) return FieldError(cp, "must be a container object");
    if (!c.contains("name") || !c["name"].is_string() || c["name"].get<std::string>().empty()) {
      return FieldError(cp + ".name", "required: a non-empty container name");
    }
    if (!c.contains("image") || !c["image"].is_string())
      return FieldError(cp + ".image", "required: the image to run (the tj-trainer image)");
    // The container that gets TF_CONFIG, as TFJob finds it: "tensorflow", else "trainer".
    if (c["name"] == "trainer" || c["name"] == "tensorflow") has_trainer = true;
    if (c.contains("env") && !c["env"].is_array()) {
      return FieldError(cp + ".env", "must be a list of {name, value} objects");
    }
    if (c.contains("args") && !c["args"].is_array()) {
      return FieldError(cp + ".args", "must be a list of strings");
    }
  }
  if (spec["containers"].size() > 1 && !has_trainer) {
    return FieldError(path + ".spec.containers",
                      "with several containers, one must be named \"tensorflow\" or \"trainer\" "
                      "(it gets TF_CONFIG)");
  }
  return Status::Ok();
}

}  // namespace

std::string ToString(ReplicaType t) {
  switch (t) {
    case ReplicaType::kChief:
      return "Chief";
    case ReplicaType::kWorker:
      return "Worker";
    case ReplicaType::kEvaluator:
      return "Evaluator";
  }
  return "?";
}

std::string TaskName(ReplicaType t) {
  switch (t) {
    case ReplicaType::kChief:
      return "chief";
    case ReplicaType::kWorker:
      return "worker";
    case ReplicaType::kEvaluator:
      return "evaluator";
  }
  return "?";
}

std::optional<ReplicaType> ParseReplicaType(const std::string& s) {
  for (ReplicaType t : {ReplicaType::kChief, ReplicaType::kWorker, ReplicaType::kEvaluator}) {
    if (s == ToString(t) || s == TaskName(t)) return t;
  }
  return std::nullopt;
}

std::string ToString(RestartPolicy p) {
  switch (p) {
    case RestartPolicy::kNever:
      return "Never";
    case RestartPolicy::kOnFailure:
      return "OnFailure";
    case RestartPolicy::kExitCode:
      return "ExitCode";
    case RestartPolicy::kAlways:
      return "Always";
  }
  return "?";
}

std::string ToString(CleanPodPolicy p) {
  switch (p) {
    case CleanPodPolicy::kAll:
      return "All";
    case CleanPodPolicy::kRunning:
      return "Running";
    case CleanPodPolicy::kNone:
      return "None";
  }
  return "?";
}

std::string ToString(SuccessPolicy p) {
  return p == SuccessPolicy::kChief ? "Chief" : "AllWorkers";
}

std::string ToString(GangScheduler g) {
  switch (g) {
    case GangScheduler::kAuto:
      return "Auto";
    case GangScheduler::kNone:
      return "None";
    case GangScheduler::kVolcano:
      return "Volcano";
    case GangScheduler::kCoscheduling:
      return "Coscheduling";
  }
  return "Auto";
}

namespace {

// spec.runPolicy.schedulingPolicy of `run` into out.run_policy (the replica specs parsed).
Status ParseSchedulingPolicy(const json& run, TrainingJobSpec& out) {
  const std::string path = "spec.runPolicy.schedulingPolicy";
  if (!run.contains("schedulingPolicy") || run["schedulingPolicy"].is_null()) return Status::Ok();
  const json& sp = run["schedulingPolicy"];
  if (!sp.is_object()) return FieldError(path, "must be an object");
  SchedulingPolicy& p = out.run_policy.scheduling_policy;
  std::optional<std::string> gang;
  TJ_RETURN_IF_ERROR(
      ReadEnum(sp, "gang", path, {"Auto", "None", "Volcano", "Coscheduling"}, &gang));
  if (gang == "None") p.gang = GangScheduler::kNone;
  if (gang == "Volcano") p.gang = GangScheduler::kVolcano;
  if (gang == "Coscheduling") p.gang = GangScheduler::kCoscheduling;
  const int64_t gang_size = out.Replicas(ReplicaType::kChief) + out.Replicas(ReplicaType::kWorker);
  std::optional<int64_t> v;
  TJ_RETURN_IF_ERROR(ReadInt(sp, "minAvailable", path, 1, gang_size, &v));
  if (v) p.min_available = static_cast<int32_t>(*v);
  TJ_RETURN_IF_ERROR(ReadInt(sp, "scheduleTimeoutSeconds", path, 1, INT32_MAX, &v));
  if (v) p.schedule_timeout_seconds = static_cast<int32_t>(*v);
  for (auto [key, into] :
       {std::pair<const char*, std::string*>{"queue", &p.queue},
        std::pair<const char*, std::string*>{"priorityClass", &p.priority_class}}) {
    if (!sp.contains(key) || sp[key].is_null()) continue;
    if (!sp[key].is_string()) return FieldError(path + "." + key, "must be a string");
    *into = sp[key].get<std::string>();
  }
  return Status::Ok();
}

// spec.elasticPolicy into out.elastic (the replica specs parsed). The Worker replicas (the
// API server defaults them to 1) are the first gang's size, between minReplicas and
// maxReplicas.
Status ParseElasticPolicy(const json& spec, TrainingJobSpec& out) {
  const std::string path = "spec.elasticPolicy";
  if (!spec.contains("elasticPolicy") || spec["elasticPolicy"].is_null()) return Status::Ok();
  const json& ep = spec["elasticPolicy"];
  if (!ep.is_object()) return FieldError(path, "must be an object {minReplicas, maxReplicas}");
  ElasticPolicy e;
  std::optional<int64_t> v;
  TJ_RETURN_IF_ERROR(ReadInt(ep, "maxReplicas", path, 1, kMaxWorkers, &v));
  if (!v) return FieldError(path + ".maxReplicas", "required: the most workers the gang may have");
  e.max_replicas = static_cast<int32_t>(*v);
  v.reset();
  TJ_RETURN_IF_ERROR(ReadInt(ep, "minReplicas", path, 1, e.max_replicas, &v));
  if (!v) return FieldError(path + ".minReplicas", "required: the fewest workers to go on with");
  e.min_replicas = static_cast<int32_t>(*v);
  std::optional<int64_t> timeout;
  TJ_RETURN_IF_ERROR(ReadDurationSeconds(ep, "scheduleTimeoutSeconds", path, 1, &timeout));
  if (timeout) e.schedule_timeout_seconds = *timeout;
  const int32_t chiefs = out.Replicas(ReplicaType::kChief);
  v.reset();
  TJ_RETURN_IF_ERROR(ReadInt(ep, "shards", path, 1, kMaxElasticShards, &v));
  e.shards = v ? static_cast<int32_t>(*v) : e.max_replicas + chiefs;
  if (!e.Trains(e.max_replicas, chiefs)) {
    return FieldError(path + ".shards",
                      std::to_string(e.shards) + " is not a multiple of the full gang's " +
                          std::to_string(e.max_replicas + chiefs) +
                          " replicas: every size the gang takes must divide the shards");
  }
  if (e.min_replicas < e.max_replicas &&
      e.LargestSizeUpTo(e.max_replicas - 1, chiefs) == std::nullopt) {
    return FieldError(path + ".shards",
                      "no worker count from minReplicas (" + std::to_string(e.min_replicas) +
                          ") below maxReplicas trains " + std::to_string(e.shards) +
                          " shards (its replicas" + (chiefs > 0 ? ", with the chief," : "") +
                          " must divide them): set shards to a multiple of each size the gang "
                          "may take, e.g. " +
                          std::to_string(std::lcm(e.min_replicas + chiefs, e.shards)));
  }
  const int32_t first = out.Replicas(ReplicaType::kWorker);
  if (first < e.min_replicas || first > e.max_replicas || !e.Trains(first, chiefs)) {
    return FieldError("spec.replicaSpecs.Worker.replicas",
                      std::to_string(first) +
                          " is not a size the elastic gang may take: the first gang's workers, "
                          "between spec.elasticPolicy.minReplicas (" +
                          std::to_string(e.min_replicas) + ") and maxReplicas (" +
                          std::to_string(e.max_replicas) + "), whose replicas divide the " +
                          std::to_string(e.shards) +
                          " shards; the API server makes it 1 when it is not given");
  }
  out.elastic = e;
  return Status::Ok();
}

}  // namespace

bool ElasticPolicy::Trains(int32_t workers, int32_t chiefs) const {
  return workers >= 1 && shards % (workers + chiefs) == 0;
}

std::optional<int32_t> ElasticPolicy::LargestSizeUpTo(int32_t at_most, int32_t chiefs) const {
  for (int32_t w = std::min(at_most, max_replicas); w >= min_replicas; --w) {
    if (Trains(w, chiefs)) return w;
  }
  return std::nullopt;
}

int32_t TrainingJobSpec::Replicas(ReplicaType t) const {
  auto it = replica_specs.find(t);
  return it == replica_specs.end() ? 0 : it->second.replicas;
}

ReplicaType ChiefReplicaType(int32_t chief_replicas) {
  return chief_replicas > 0 ? ReplicaType::kChief : ReplicaType::kWorker;
}

ReplicaType TrainingJobSpec::ChiefType() const {
  return ChiefReplicaType(Replicas(ReplicaType::kChief));
}

StatusOr<TrainingJobSpec> ParseSpec(const json& spec) {
  TrainingJobSpec out;
  if (!spec.is_object()) return FieldError("spec", "required: an object with replicaSpecs");
  if (!spec.contains("replicaSpecs") || !spec["replicaSpecs"].is_object()) {
    return FieldError("spec.replicaSpecs", "required: an object keyed by replica type (Worker)");
  }
  for (const auto& [key, rs] : spec["replicaSpecs"].items()) {
    const std::string path = "spec.replicaSpecs." + key;
    std::optional<ReplicaType> type;
    for (ReplicaType t : {ReplicaType::kChief, ReplicaType::kWorker, ReplicaType::kEvaluator}) {
      if (key == ToString(t)) type = t;
    }
    if (!type && key == "Master") {
      return FieldError(path,
                        "TFJob's Master is not a replica type here: rename it to Chief (the same "
                        "role: rank 0, writes the checkpoints)");
    }
    if (!type && key == "PS") {
      return FieldError(path,
                        "parameter servers (TensorFlow's ParameterServerStrategy) are not "
                        "supported: use Worker replicas with MultiWorkerMirroredStrategy "
                        "(synchronous all-reduce), and an optional Chief");
    }
    if (!type) {
      return FieldError(path, "unknown replica type: must be one of Chief, Worker, Evaluator");
    }
    if (!rs.is_object()) return FieldError(path, "must be an object with replicas and template");
    ReplicaSpec r;
    std::optional<int64_t> replicas;
    const int64_t max = *type == ReplicaType::kWorker ? kMaxWorkers : 1;
    const int64_t min = *type == ReplicaType::kWorker ? 1 : 0;
    TJ_RETURN_IF_ERROR(ReadInt(rs, "replicas", path, min, max, &replicas));
    if (replicas) r.replicas = static_cast<int32_t>(*replicas);
    std::optional<std::string> policy;
    TJ_RETURN_IF_ERROR(
        ReadEnum(rs, "restartPolicy", path, {"Never", "OnFailure", "ExitCode", "Always"}, &policy));
    if (policy) {
      if (*policy == "Never") r.restart_policy = RestartPolicy::kNever;
      if (*policy == "OnFailure") r.restart_policy = RestartPolicy::kOnFailure;
      if (*policy == "ExitCode") r.restart_policy = RestartPolicy::kExitCode;
      if (*policy == "Always") r.restart_policy = RestartPolicy::kAlways;
    }
    // Validated where it is and copied once: a template may be megabytes as a JSON tree.
    static const json kNoTemplate;
    auto tmpl = rs.find("template");
    const json& t = tmpl != rs.end() ? *tmpl : kNoTemplate;
    TJ_RETURN_IF_ERROR(ValidateTemplate(t, path + ".template"));
    r.pod_template = t;
    out.replica_specs[*type] = std::move(r);
  }
  if (!out.replica_specs.contains(ReplicaType::kWorker)) {
    return FieldError("spec.replicaSpecs.Worker", "required: a job needs at least one worker");
  }

  json run = spec.value("runPolicy", json::object());
  if (run.is_null()) run = json::object();
  if (!run.is_object()) return FieldError("spec.runPolicy", "must be an object");
  std::optional<int64_t> v;
  TJ_RETURN_IF_ERROR(ReadInt(run, "backoffLimit", "spec.runPolicy", 0, 1000000, &v));
  if (v) out.run_policy.backoff_limit = static_cast<int32_t>(*v);
  TJ_RETURN_IF_ERROR(ReadDurationSeconds(run, "activeDeadlineSeconds", "spec.runPolicy", 1,
                                         &out.run_policy.active_deadline_seconds));
  TJ_RETURN_IF_ERROR(ReadDurationSeconds(run, "ttlSecondsAfterFinished", "spec.runPolicy", 0,
                                         &out.run_policy.ttl_seconds_after_finished));
  TJ_RETURN_IF_ERROR(ReadDurationSeconds(run, "startupDeadlineSeconds", "spec.runPolicy", 1,
                                         &out.run_policy.startup_deadline_seconds));
  TJ_RETURN_IF_ERROR(ReadDurationSeconds(run, "progressDeadlineSeconds", "spec.runPolicy", 1,
                                         &out.run_policy.progress_deadline_seconds));
  std::optional<std::string> clean;
  TJ_RETURN_IF_ERROR(
      ReadEnum(run, "cleanPodPolicy", "spec.runPolicy", {"All", "Running", "None"}, &clean));
  if (clean == "All") out.run_policy.clean_pod_policy = CleanPodPolicy::kAll;
  if (clean == "None") out.run_policy.clean_pod_policy = CleanPodPolicy::kNone;
  if (run.contains("suspend") && !run["suspend"].is_null()) {
    if (!run["suspend"].is_boolean())
      return FieldError("spec.runPolicy.suspend", "must be a boolean");
    out.run_policy.suspend = run["suspend"].get<bool>();
  }

  TJ_RETURN_IF_ERROR(ParseElasticPolicy(spec, out));
  TJ_RETURN_IF_ERROR(ParseSchedulingPolicy(run, out));

  std::optional<std::string> success;
  TJ_RETURN_IF_ERROR(
      ReadEnum(spec, "successPolicy", "spec", {"", "Chief", "AllWorkers"}, &success));
  if (success == "AllWorkers") out.success_policy = SuccessPolicy::kAllWorkers;
  std::optional<int64_t> port;
  TJ_RETURN_IF_ERROR(ReadInt(spec, "port", "spec", 1, 65535, &port));
  if (port) out.port = static_cast<int32_t>(*port);
  auto failure_policy = ParseFailurePolicy(spec);
  if (!failure_policy.ok()) return failure_policy.status();
  out.failure_policy = std::move(*failure_policy);
  return out;
}

Status ValidateJobName(const std::string& name, const TrainingJobSpec& spec) {
  constexpr size_t kMaxLabel = 63;
  if (name.empty() || name.size() > kMaxLabel) {
    return FieldError("metadata.name",
                      "\"" + Utf8Prefix(name, 80) + "\" has " + std::to_string(name.size()) +
                          " characters: the job's Service and its label tjo.dev/job-name take "
                          "at most 63; choose a shorter name");
  }
  const bool letters_digits_dashes = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
  if (!letters_digits_dashes || !(name.front() >= 'a' && name.front() <= 'z') ||
      name.back() == '-') {
    return FieldError(
        "metadata.name",
        "\"" + name +
            "\" is not a DNS-1035 label, which the job's headless "
            "Service needs: lowercase letters, digits and '-', starting with a letter "
            "and ending with a letter or digit (no dots)");
  }
  for (const auto& [type, rs] : spec.replica_specs) {
    if (rs.replicas <= 0) continue;
    const std::string longest = name + "-" + TaskName(type) + "-" + std::to_string(rs.replicas - 1);
    if (longest.size() > kMaxLabel) {
      return FieldError("metadata.name",
                        "\"" + name + "\" makes the pod hostname \"" + longest + "\" of " +
                            std::to_string(longest.size()) +
                            " characters; hostnames take at most 63: shorten the name to " +
                            std::to_string(kMaxLabel - (longest.size() - name.size())) +
                            " characters or fewer");
    }
  }
  return Status::Ok();
}

namespace {

// The lifecycle state shown by `kubectl get tj`, from the conditions: Queued while Kueue has
// not admitted a job that neither runs nor has ended.
std::string StateOf(const std::vector<Condition>& conditions) {
  auto holds = [&conditions](const char* type, const char* status) {
    return std::any_of(conditions.begin(), conditions.end(),
                       [&](const Condition& c) { return c.type == type && c.status == status; });
  };
  for (const char* t : {condition::kFailed, condition::kSucceeded, condition::kSuspended,
                        condition::kRestarting, condition::kRunning}) {
    if (holds(t, "True")) return t;
  }
  if (holds(condition::kAdmitted, "False")) return kQueuedState;
  if (holds(condition::kCreated, "True")) return condition::kCreated;
  return "";
}

}  // namespace

TrainingJobStatus TrainingJobStatus::FromJson(const json& j) {
  TrainingJobStatus s;
  if (!j.is_object()) return s;
  try {
    if (j.contains("conditions") && j["conditions"].is_array()) {
      for (const auto& c : j["conditions"]) {
        if (!c.is_object()) continue;
        Condition cond{c.value("type", ""),
                       c.value("status", ""),
                       c.value("reason", ""),
                       c.value("message", ""),
                       c.value("lastTransitionTime", ""),
                       c.value("lastUpdateTime", "")};
        if (auto g = c.find("observedGeneration"); g != c.end() && g->is_number_integer()) {
          cond.observed_generation = g->get<int64_t>();
        }
        s.conditions.push_back(cond);
      }
    }
    if (j.contains("replicaStatuses") && j["replicaStatuses"].is_object()) {
      for (const auto& [k, v] : j["replicaStatuses"].items()) {
        if (!v.is_object()) continue;
        // Integers only: value<int>() of a float such as 1e300 is undefined behaviour.
        auto count = [](const json& counts, const char* key) {
          auto it = counts.find(key);
          return it != counts.end() && it->is_number_integer() ? it->get<int32_t>() : 0;
        };
        s.replica_statuses[k] = {count(v, "active"), count(v, "succeeded"), count(v, "failed")};
      }
    }
    if (auto g = j.find("observedGeneration"); g != j.end() && g->is_number_integer()) {
      s.observed_generation = g->get<int64_t>();
    }
    if (j.contains("restartCount") && j["restartCount"].is_number_integer()) {
      s.restart_count = j["restartCount"].get<int32_t>();
    }
    if (j.contains("createdGeneration") && j["createdGeneration"].is_number_integer()) {
      s.created_generation = j["createdGeneration"].get<int32_t>();
    }
    if (j.contains("evaluatorRestarts") && j["evaluatorRestarts"].is_number_integer()) {
      s.evaluator_restarts = j["evaluatorRestarts"].get<int32_t>();
    }
    s.restarts = RestartCounts::FromJson(j, s.restart_count);
    if (auto h = j.find("rendezvousKeyHash"); h != j.end() && h->is_string()) {
      s.rendezvous_key_hash = h->get<std::string>();
    }
    if (j.contains("startTime") && j["startTime"].is_string()) s.start_time = j["startTime"];
    if (j.contains("completionTime") && j["completionTime"].is_string()) {
      s.completion_time = j["completionTime"];
    }
    if (j.contains("progressTime") && j["progressTime"].is_string()) {
      s.progress_time = j["progressTime"];
    }
    if (j.contains("firstFailureTime") && j["firstFailureTime"].is_string()) {
      s.first_failure_time = j["firstFailureTime"];
    }
    if (j.contains("progress") && j["progress"].is_object()) s.progress = j["progress"];
    if (j.contains("goodput")) s.goodput = Goodput::FromJson(j["goodput"]);
    if (auto e = j.find("elastic"); e != j.end() && e->is_object()) {
      if (auto w = e->find("workers"); w != e->end() && w->is_number_integer() &&
                                       w->get<int64_t>() >= 1 && w->get<int64_t>() <= kMaxWorkers) {
        s.elastic_workers = w->get<int32_t>();
      }
    }
    if (j.contains("evaluation") && j["evaluation"].is_object()) s.evaluation = j["evaluation"];
  } catch (const json::exception&) {
    // A malformed field written by someone else: keep what parsed.
  }
  s.state = StateOf(s.conditions);
  return s;
}

json TrainingJobStatus::ToJson() const {
  json j = json::object();
  json conds = json::array();
  for (const auto& c : conditions) {
    json cj = {
        {"type", c.type}, {"status", c.status}, {"reason", c.reason}, {"message", c.message}};
    if (!c.last_transition_time.empty()) cj["lastTransitionTime"] = c.last_transition_time;
    if (!c.last_update_time.empty()) cj["lastUpdateTime"] = c.last_update_time;
    if (c.observed_generation > 0) cj["observedGeneration"] = c.observed_generation;
    conds.push_back(cj);
  }
  j["conditions"] = conds;
  json rs = json::object();
  for (const auto& [k, v] : replica_statuses) {
    rs[k] = {{"active", v.active}, {"succeeded", v.succeeded}, {"failed", v.failed}};
  }
  j["replicaStatuses"] = rs;
  j["restartCount"] = restart_count;
  j["createdGeneration"] = created_generation;
  if (observed_generation > 0) j["observedGeneration"] = observed_generation;
  if (evaluator_restarts > 0) j["evaluatorRestarts"] = evaluator_restarts;
  j["restarts"] = restarts.ToJson(restart_count);
  if (!rendezvous_key_hash.empty()) j["rendezvousKeyHash"] = rendezvous_key_hash;
  if (start_time) j["startTime"] = *start_time;
  if (completion_time) j["completionTime"] = *completion_time;
  if (first_failure_time) j["firstFailureTime"] = *first_failure_time;
  if (progress_time) j["progressTime"] = *progress_time;
  if (progress.is_object()) j["progress"] = progress;
  if (!goodput.Empty()) j["goodput"] = goodput.ToJson();
  if (elastic_workers) j["elastic"] = {{"workers", *elastic_workers}};
  if (evaluation.is_object()) j["evaluation"] = evaluation;
  const std::string st = StateOf(conditions);
  if (!st.empty()) j["state"] = st;
  return j;
}

const Condition* TrainingJobStatus::Find(const std::string& type) const {
  for (const auto& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool TrainingJobStatus::FinishedIn(const json& job) {
  if (!job.is_object() || !job.contains("status") || !job["status"].is_object()) return false;
  const json& status = job["status"];
  if (!status.contains("conditions") || !status["conditions"].is_array()) return false;
  for (const json& c : status["conditions"]) {
    if (!c.is_object()) continue;
    const json type = c.value("type", json());
    if ((type == condition::kSucceeded || type == condition::kFailed) &&
        c.value("status", json()) == "True") {
      return true;
    }
  }
  return false;
}

bool TrainingJobStatus::IsTrue(const std::string& type) const {
  const Condition* c = Find(type);
  return c != nullptr && c->status == "True";
}

bool TrainingJobStatus::SetCondition(const std::string& type, bool status,
                                     const std::string& reason, const std::string& message,
                                     kube::WallTime now) {
  const std::string st = status ? "True" : "False";
  const std::string t = kube::FormatTime(now);
  for (auto& c : conditions) {
    if (c.type != type) continue;
    if (c.status == st && c.reason == reason && c.message == message &&
        c.observed_generation == observed_generation) {
      return false;
    }
    if (c.status != st) c.last_transition_time = t;
    c.status = st;
    c.reason = reason;
    c.message = message;
    c.last_update_time = t;
    c.observed_generation = observed_generation;
    state = StateOf(conditions);
    return true;
  }
  if (!status) return false;  // a condition that never held is not written as False
  conditions.push_back({type, st, reason, message, t, t, observed_generation});
  state = StateOf(conditions);
  return true;
}

bool TrainingJobStatus::SetWaitingCondition(const std::string& type, const std::string& reason,
                                            const std::string& message, kube::WallTime now) {
  if (Find(type) != nullptr) return SetCondition(type, false, reason, message, now);
  const std::string t = kube::FormatTime(now);
  conditions.push_back({type, "False", reason, message, t, t, observed_generation});
  state = StateOf(conditions);
  return true;
}

std::string OtherManager(const json& job) {
  if (!job.is_object()) return "";
  auto spec = job.find("spec");
  if (spec == job.end() || !spec->is_object()) return "";
  auto m = spec->find("managedBy");
  if (m == spec->end() || m->is_null()) return "";
  if (!m->is_string()) return m->dump().substr(0, 80);
  const std::string name = m->get<std::string>();
  return name == kControllerName ? "" : name;
}

ObjectRef RefOf(const json& object) {
  // A malformed object must not end the process: a field of another type reads as absent.
  const json& m = kube::MetadataOf(object);
  ObjectRef r;
  r.name = kube::TextOf(m, "name");
  r.ns = kube::TextOf(m, "namespace");
  r.uid = kube::TextOf(m, "uid");
  return r;
}

}  // namespace tj::api
