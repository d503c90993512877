// Fuzz target: ParseTfConfig (trainer/cluster/config/tf_config.h), the parser of the TF_CONFIG
// environment variable. Any bytes must give a TfConfig or an error, never a crash; an
// accepted TfConfig must keep the contract the trainer relies on (its own task exists, ranks
// and addresses are consistent, every address parses).
#include <cstdint>
#include <string_view>

#include "tests/fuzz/fuzz_check.h"
#include "trainer/cluster/config/tf_config.h"

using tj::cluster::ParseHostPort;
using tj::cluster::ParseTfConfig;
using tj::cluster::TaskType;
using tj::cluster::TfConfig;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tj::StatusOr<TfConfig> parsed = ParseTfConfig(text);
  if (!parsed.ok()) {
    TJ_FUZZ_CHECK(!parsed.status().message().empty());
    return 0;
  }
  const TfConfig& c = *parsed;
  TJ_FUZZ_CHECK(c.task_type != TaskType::kPs);
  TJ_FUZZ_CHECK(c.task_index >= 0);
  TJ_FUZZ_CHECK(c.chief.size() <= 1 && c.evaluator.size() <= 1);
  TJ_FUZZ_CHECK(!c.chief.empty() || !c.worker.empty());
  // Only an evaluator may be absent from the cluster (as Kubeflow's TFJob writes it).
  TJ_FUZZ_CHECK(!c.own_address().empty() ||
                (c.task_type == TaskType::kEvaluator && c.evaluator.empty()));
  TJ_FUZZ_CHECK(!c.chief_address().empty());
  TJ_FUZZ_CHECK(!c.task_name().empty());
  const int n = c.collective_size();
  TJ_FUZZ_CHECK(n >= 1);
  if (c.in_collective()) {
    TJ_FUZZ_CHECK(c.rank() >= 0 && c.rank() < n);
    TJ_FUZZ_CHECK(c.AddressOfRank(c.rank()) == c.own_address());
    TJ_FUZZ_CHECK(c.TaskNameOfRank(c.rank()) == c.task_name());
    TJ_FUZZ_CHECK(c.is_chief() == (c.rank() == 0));
  } else {
    TJ_FUZZ_CHECK(c.rank() == -1 && !c.is_chief());
  }
  TJ_FUZZ_CHECK(c.AddressOfRank(0) == c.chief_address());
  for (int r = 0; r < n; ++r) {
    TJ_FUZZ_CHECK(ParseHostPort(c.AddressOfRank(r), "rank").ok());
    TJ_FUZZ_CHECK(!c.TaskNameOfRank(r).empty());
  }
  for (const auto* list : {&c.chief, &c.worker, &c.ps, &c.evaluator}) {
    for (const auto& address : *list) {
      tj::StatusOr<tj::cluster::HostPort> hp = ParseHostPort(address, "address");
      TJ_FUZZ_CHECK(hp.ok() && !hp->host.empty() && hp->port >= 1 && hp->port <= 65535);
    }
  }
  return 0;
}
