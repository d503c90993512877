// The largest job the API admits (api::kMaxWorkers workers, a chief and an evaluator, the
// longest job name that fits, a 63-character namespace, a 5-digit port): every pod the
// operator builds for it must start on Linux and be stored by the API server, and the trainer
// must accept its TF_CONFIG. One more worker, or one more character of name, is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "operator/api/training_job.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler.h"
#include "trainer/cluster/config/tf_config.h"

namespace tj::controller {
namespace {

using nlohmann::json;

// Linux's MAX_ARG_STRLEN: execve fails with E2BIG on an environment string ("NAME=value" and
// its NUL) longer than 32 pages.
constexpr size_t kMaxEnvString = 32 * 4096;
// etcd's default request limit (--max-request-bytes 1.5 MiB): a larger Pod cannot be stored.
constexpr size_t kMaxObjectBytes = 1536 * 1024;

json LargestJob(int workers, const std::string& name) {
  const json tmpl = {
      {"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", "tj-trainer"}}})}}}};
  return {{"apiVersion", api::kApiVersion},
          {"kind", api::kKind},
          {"metadata", {{"name", name}, {"namespace", std::string(63, 'n')}, {"uid", "u"}}},
          {"spec",
           {{"port", 65535},
            {"replicaSpecs",
             {{"Chief", {{"replicas", 1}, {"template", tmpl}}},
              {"Worker", {{"replicas", workers}, {"template", tmpl}}},
              {"Evaluator", {{"replicas", 1}, {"template", tmpl}}}}}}}};
}

std::string EnvValue(const json& pod, const std::string& name) {
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == name) return e["value"];
  }
  return "";
}

// The longest name for which every "<name>-<type>-<index>" is a hostname of at most 63
// characters: "-evaluator-0" (12) is longer than "-worker-511" (11).
std::string LongestName() {
  const size_t suffix = std::max(std::string("-evaluator-0").size(),
                                 ("-worker-" + std::to_string(api::kMaxWorkers - 1)).size());
  return std::string(63 - suffix, 'j');
}

TEST(ReplicaLimit, TheLargestJobsPodsStartAndAreStored) {
  const json job = LargestJob(api::kMaxWorkers, LongestName());
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_TRUE(api::ValidateJobName(LongestName(), *spec).ok());

  const auto start = std::chrono::steady_clock::now();
  size_t pods = 0, total_bytes = 0, largest_env = 0, largest_pod = 0;
  for (api::ReplicaType t :
       {api::ReplicaType::kChief, api::ReplicaType::kWorker, api::ReplicaType::kEvaluator}) {
    for (int i = 0; i < spec->Replicas(t); ++i) {
      const json pod = BuildPod(job, *spec, t, i, /*gang=*/1000000);
      const std::string tf_config = EnvValue(pod, "TF_CONFIG");
      largest_env = std::max(largest_env, std::string("TF_CONFIG=").size() + tf_config.size() + 1);
      const size_t bytes = pod.dump().size();
      largest_pod = std::max(largest_pod, bytes);
      total_bytes += bytes;
      ++pods;
      if (i == 0 || i + 1 == spec->Replicas(t)) {  // the trainer reads it as it is
        auto parsed = cluster::ParseTfConfig(tf_config);
        ASSERT_TRUE(parsed.ok()) << parsed.status().message();
        if (t != api::ReplicaType::kEvaluator) {
          EXPECT_EQ(parsed->collective_size(), api::kMaxWorkers + 1);
        }
      }
    }
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(pods, static_cast<size_t>(api::kMaxWorkers + 2));
  EXPECT_LE(largest_env, kMaxEnvString) << "TF_CONFIG of " << largest_env << " bytes";
  EXPECT_LE(largest_pod, kMaxObjectBytes);
  // Reported for docs/reliability.md: the size of the largest TF_CONFIG, and the work of one
  // gang's pods (built, serialized, parsed by the trainer twice per type).
  std::printf(
      "%zu pods, largest TF_CONFIG env %zu bytes (limit %zu), largest pod %zu bytes, "
      "%zu bytes in all, built in %.0f ms\n",
      pods, largest_env, kMaxEnvString, largest_pod, total_bytes, ms);
}

TEST(ReplicaLimit, OneWorkerMoreOrOneCharacterMoreIsRefused) {
  auto more = api::ParseSpec(LargestJob(api::kMaxWorkers + 1, "j")["spec"]);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().message(),
            "spec.replicaSpecs.Worker.replicas: must be <= " + std::to_string(api::kMaxWorkers));
  auto spec = api::ParseSpec(LargestJob(api::kMaxWorkers, "j")["spec"]);
  ASSERT_TRUE(spec.ok());
  Status longer = api::ValidateJobName(LongestName() + "j", *spec);
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.message().find("hostnames take at most 63"), std::string::npos)
      << longer.message();
}

// The reconciler's work for the largest job is one pass that creates the gang and, once it
// runs, passes that create and delete nothing.
TEST(ReplicaLimit, TheReconcilerCreatesTheLargestGangOnceAndThenLeavesItAlone) {
  Observed in;
  in.job = LargestJob(api::kMaxWorkers, LongestName());
  in.now = std::chrono::system_clock::from_time_t(1700000000);
  in.new_rendezvous_key = "k";
  auto start = std::chrono::steady_clock::now();
  const Decision first = Reconcile(in);
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::vector<json> pods;
  for (const Action& a : first.actions) {
    if (a.kind == Action::Kind::kCreate && a.resource.plural == "pods") pods.push_back(ObjectOf(a));
  }
  ASSERT_EQ(pods.size(), static_cast<size_t>(api::kMaxWorkers + 2));
  ASSERT_TRUE(first.status);

  in.job["status"] = *first.status;
  in.service = json::object();
  for (json& p : pods) p["status"] = {{"phase", "Running"}};
  in.pods = pods;
  start = std::chrono::steady_clock::now();
  const Decision again = Reconcile(in);
  const double again_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (const Action& a : again.actions) {
    EXPECT_NE(a.kind, Action::Kind::kCreate) << a.resource.plural << "/" << a.name;
    EXPECT_NE(a.kind, Action::Kind::kDelete) << a.name;
  }
  std::printf("reconcile of %zu pods: first pass %.0f ms, steady pass %.0f ms\n", pods.size(),
              first_ms, again_ms);
}

}  // namespace
}  // namespace tj::controller
