// Fuzz target: the TrainingJob parser (operator/api/training_job.h): ParseSpec, and the
// lenient TrainingJobStatus::FromJson / ToJson and RefOf the operator applies to every object
// it reads. The input is the object's JSON as the API server would send it (a whole object
// with "spec"/"status", or a bare spec). Any bytes must give a spec or an error, never a
// crash; an accepted spec must be within the documented bounds.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "operator/api/training_job.h"
#include "tests/fuzz/fuzz_check.h"

using nlohmann::json;
using tj::api::ReplicaType;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return 0;
  const bool whole = object.is_object() && object.contains("spec");
  const json& spec = whole ? object["spec"] : object;

  tj::StatusOr<tj::api::TrainingJobSpec> parsed = tj::api::ParseSpec(spec);
  if (parsed.ok()) {
    const tj::api::TrainingJobSpec& s = *parsed;
    TJ_FUZZ_CHECK(s.Replicas(ReplicaType::kWorker) >= 1);
    TJ_FUZZ_CHECK(s.Replicas(ReplicaType::kChief) >= 0 && s.Replicas(ReplicaType::kChief) <= 1);
    TJ_FUZZ_CHECK(s.Replicas(ReplicaType::kEvaluator) >= 0 &&
                  s.Replicas(ReplicaType::kEvaluator) <= 1);
    TJ_FUZZ_CHECK(s.port >= 1 && s.port <= 65535);
    TJ_FUZZ_CHECK(s.run_policy.backoff_limit >= 0);
    for (const auto& [type, replica] : s.replica_specs) {
      TJ_FUZZ_CHECK(replica.pod_template.is_object());
      TJ_FUZZ_CHECK(!tj::api::ToString(type).empty() && !tj::api::TaskName(type).empty());
    }
  } else {
    TJ_FUZZ_CHECK(!parsed.status().message().empty());
  }

  // Status: lenient in, and stable through one round trip.
  const json& status_json = whole && object.contains("status") ? object["status"] : object;
  const tj::api::TrainingJobStatus status = tj::api::TrainingJobStatus::FromJson(status_json);
  const json out = status.ToJson();
  TJ_FUZZ_CHECK(tj::api::TrainingJobStatus::FromJson(out).ToJson() == out);
  (void)tj::api::RefOf(object);
  return 0;
}
