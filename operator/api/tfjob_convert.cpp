#include "operator/api/tfjob_convert.h"

#include "kube/object_meta.h"
#include "operator/api/training_job.h"

namespace tj::api {
namespace {

using nlohmann::json;

Status FieldError(const std::string& field, const std::string& what) {
  return Status::Error(field + ": " + what);
}

// The run policy fields both kinds share, with the same meaning.
constexpr const char* kRunPolicyFields[] = {"backoffLimit", "activeDeadlineSeconds",
                                            "ttlSecondsAfterFinished", "cleanPodPolicy", "suspend"};

// metadata a user wrote: name, namespace, labels, annotations. What the API server wrote
// (uid, resourceVersion, managedFields, ...) belongs to the TFJob object, not to a new one.
json UserMetadata(const json& md) {
  json out = json::object();
  for (const char* k : {"name", "generateName", "namespace", "labels", "annotations"}) {
    if (md.contains(k)) out[k] = md[k];
  }
  return out;
}

Status ConvertReplicas(const json& specs, json& out, std::vector<std::string>& notes) {
  if (!specs.is_object()) {
    return FieldError("spec.tfReplicaSpecs", "must be an object keyed by replica type");
  }
  if (specs.contains("Master") && specs.contains("Chief")) {
    return FieldError("spec.tfReplicaSpecs",
                      "has both Master and Chief; TensorFlow has one chief: keep one of them");
  }
  for (const auto& [type, rs] : specs.items()) {
    const std::string path = "spec.tfReplicaSpecs." + type;
    std::string to = type;
    if (type == "PS") {
      return FieldError(path,
                        "parameter servers (ParameterServerStrategy) cannot run here: training "
                        "is synchronous all-reduce (MultiWorkerMirroredStrategy). Move the PS "
                        "replicas' work to Worker replicas and switch the program's strategy");
    }
    if (type == "Master") {
      to = "Chief";
      notes.push_back(path +
                      " became replicaSpecs.Chief (the same role; TF_CONFIG names the "
                      "task \"chief\", as TensorFlow 2 does, not \"master\")");
    } else if (type != "Chief" && type != "Worker" && type != "Evaluator") {
      return FieldError(path,
                        "unknown replica type: TFJob's are Chief, Master, Worker, PS and "
                        "Evaluator");
    }
    if (!rs.is_object()) return FieldError(path, "must be an object with replicas and template");
    json r = json::object();
    for (const auto& [k, v] : rs.items()) {
      if (k == "replicas" || k == "template" || k == "restartPolicy") {
        r[k] = v;
      } else {
        notes.push_back(path + "." + k + " dropped: TrainingJob has no such field");
      }
    }
    // TFJob's default restart policy is Never; TrainingJob's is ExitCode. Keep TFJob's meaning.
    if (!r.contains("restartPolicy")) {
      r["restartPolicy"] = "Never";
      notes.push_back("replicaSpecs." + to +
                      ".restartPolicy set to Never, TFJob's default (TrainingJob's default, "
                      "ExitCode, restarts on a retryable exit)");
    }
    out[to] = std::move(r);
  }
  return Status::Ok();
}

// A TFJob's runPolicy.schedulingPolicy: TrainingJob's has the same fields but minResources
// (docs/gangs.md); TFJob's gang scheduler is the operator's flag, TrainingJob's gang is Auto
// unless the job says. TFJob's minAvailable counts every replica, TrainingJob's gang is the
// chief and the workers (`replicas`: the converted replicaSpecs).
json ConvertSchedulingPolicy(const json& v, const json& replicas, std::vector<std::string>& notes) {
  json policy = json::object();
  for (const auto& [pk, pv] : v.items()) {
    if (pk == "minAvailable" || pk == "queue" || pk == "priorityClass" ||
        pk == "scheduleTimeoutSeconds") {
      policy[pk] = pv;
    } else {
      notes.push_back("spec.runPolicy.schedulingPolicy." + pk +
                      " dropped: TrainingJob has no such field");
    }
  }
  int64_t gang = 0;
  for (const char* t : {"Chief", "Worker"}) {
    const json rs = replicas.value(t, json());
    if (!rs.is_object()) continue;
    const json n = rs.value("replicas", json(1));
    gang += n.is_number_integer() ? n.get<int64_t>() : 1;
  }
  const json min = policy.value("minAvailable", json());
  if (min.is_number_integer() && min.get<int64_t>() > gang && gang > 0) {
    policy["minAvailable"] = gang;
    notes.push_back("spec.runPolicy.schedulingPolicy.minAvailable " + min.dump() + " became " +
                    std::to_string(gang) +
                    ": the gang is the chief and the workers (the evaluator is scheduled on its "
                    "own)");
  }
  return policy;
}

}  // namespace

StatusOr<TfJobConversion> ConvertTfJob(const json& tfjob) {
  if (!tfjob.is_object()) return Status::Error("a TFJob must be an object");
  for (const char* k : {"apiVersion", "kind"}) {
    if (tfjob.contains(k) && !tfjob[k].is_string()) return FieldError(k, "must be a string");
  }
  const std::string api_version = kube::TextOf(tfjob, "apiVersion");
  const std::string kind = kube::TextOf(tfjob, "kind");
  if (kind != "TFJob") {
    return FieldError("kind", "\"" + kind + "\" is not TFJob: only TFJobs are converted");
  }
  if (api_version != "kubeflow.org/v1") {
    return FieldError("apiVersion", "\"" + api_version +
                                        "\": only kubeflow.org/v1 TFJobs are converted (the "
                                        "version Kubeflow's training operator serves)");
  }
  const json md = tfjob.value("metadata", json::object());
  if (!md.is_object()) return FieldError("metadata", "must be an object");
  for (const char* k : {"name", "generateName", "namespace"}) {
    if (md.contains(k) && !md[k].is_string()) {
      return FieldError(std::string("metadata.") + k, "must be a string");
    }
  }
  for (const char* k : {"labels", "annotations"}) {
    if (md.contains(k) && !md[k].is_object()) {
      return FieldError(std::string("metadata.") + k, "must be a map of strings");
    }
  }
  const json spec = tfjob.value("spec", json::object());
  if (!spec.is_object()) return FieldError("spec", "must be an object");
  if (!spec.contains("tfReplicaSpecs")) {
    return FieldError("spec.tfReplicaSpecs", "required: the replica types (Worker, ...)");
  }

  TfJobConversion c;
  json out_spec = json::object();
  json replicas = json::object();
  TJ_RETURN_IF_ERROR(ConvertReplicas(spec["tfReplicaSpecs"], replicas, c.notes));
  out_spec["replicaSpecs"] = std::move(replicas);

  json run_policy = json::object();
  // Before runPolicy, TFJob v1 had these at spec level; Kubeflow's older examples still do.
  for (const char* k : kRunPolicyFields) {
    if (spec.contains(k)) run_policy[k] = spec[k];
  }
  if (spec.contains("runPolicy")) {
    const json& rp = spec["runPolicy"];
    if (!rp.is_object()) return FieldError("spec.runPolicy", "must be an object");
    for (const auto& [k, v] : rp.items()) {
      bool shared = false;
      for (const char* f : kRunPolicyFields) shared = shared || k == f;
      if (shared) {
        run_policy[k] = v;
      } else if (k == "schedulingPolicy" && v.is_object()) {
        json policy = ConvertSchedulingPolicy(v, out_spec["replicaSpecs"], c.notes);
        if (!policy.empty()) run_policy["schedulingPolicy"] = std::move(policy);
      } else {
        c.notes.push_back("spec.runPolicy." + k + " dropped: TrainingJob has no such field");
      }
    }
  }
  if (!run_policy.empty()) out_spec["runPolicy"] = std::move(run_policy);

  for (const auto& [k, v] : spec.items()) {
    if (k == "tfReplicaSpecs" || k == "runPolicy") continue;
    bool shared = false;
    for (const char* f : kRunPolicyFields) shared = shared || k == f;
    if (shared) continue;  // moved into runPolicy above
    if (k == "successPolicy") {
      if (!v.is_string()) return FieldError("spec.successPolicy", "must be a string");
      const std::string policy = v.get<std::string>();
      if (policy == "AllWorkers") {
        out_spec["successPolicy"] = "AllWorkers";
      } else if (!policy.empty()) {
        return FieldError("spec.successPolicy",
                          "\"" + policy + "\" is not a TFJob success policy (\"\" or AllWorkers)");
      }  // "": the chief (else worker 0) decides, TrainingJob's default Chief
    } else if (k == "enableDynamicWorker") {
      if (v == true) {
        c.notes.push_back(
            "spec.enableDynamicWorker dropped: the number of workers is fixed while a job runs");
      }
    } else {
      c.notes.push_back("spec." + k + " dropped: TrainingJob has no such field");
    }
  }

  c.training_job = {{"apiVersion", kApiVersion},
                    {"kind", kKind},
                    {"metadata", UserMetadata(md)},
                    {"spec", std::move(out_spec)}};
  // What the operator would refuse is better said now than after kubectl apply.
  auto parsed = ParseSpec(c.training_job["spec"]);
  if (!parsed.ok()) return parsed.status().WithContext("the converted TrainingJob is invalid");
  return c;
}

}  // namespace tj::api
