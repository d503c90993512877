// Kubeflow's TFJob (kubeflow.org/v1) as a TrainingJob (tjo.dev/v1alpha1): what
// `tj-operator convert` does, so that a team's TFJob manifests run here unchanged but for the
// envelope. Every field TFJob defines is either carried over with the same meaning or named in
// a note saying what became of it; a manifest that cannot run here (parameter servers) is an
// error saying what to use instead. docs/tfjob.md has the table.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::api {

struct TfJobConversion {
  nlohmann::json training_job;     // a TrainingJob object, ready for kubectl apply
  std::vector<std::string> notes;  // what was changed or dropped, one sentence each
};

// Converts one TFJob object (JSON, as kubectl get -o json or a YAML manifest gives it).
// Errors name the field: not a TFJob, a PS replica, Master beside Chief, a malformed field.
StatusOr<TfJobConversion> ConvertTfJob(const nlohmann::json& tfjob);

}  // namespace tj::api
