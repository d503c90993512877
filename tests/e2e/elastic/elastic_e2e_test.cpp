// An elastic job on the local cluster (label `fault`; docs/elastic.md). The workers ask for one
// `tjo.dev/e2e-slot` each, an extended resource the test gives the process node: one slot, so
// the gang of two finds room for one worker; scheduleTimeoutSeconds later the operator restarts
// it with one (cause Resized), which trains the job's two shards alone. A capacity probe waits
// for the second worker's room; the test gives the node a second slot, the probe is placed and
// the gang grows back to two from the backup the single worker wrote as it stopped. In elastic
// mode the global batch and the data order do not depend on the size: the job ends with the
// final weights of a run that had two workers throughout.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/e2e/support/e2e_support.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::Eventually;
using testing::Kubectl;

constexpr char kJob[] = "fmnist";
constexpr char kChief[] = "fmnist-worker-0";  // no Chief replica: worker 0 is the chief
constexpr char kProbe[] = "fmnist-probe-1";
constexpr char kNode[] = "local-node";
constexpr char kSlot[] = "tjo.dev/e2e-slot";
// Each backup write held this long: training goes on well past the first backup.
constexpr int kPaceMs = 1500;
const seconds kStartTimeout(240);
const seconds kFinishTimeout(600);

// The fault tests' job, elastic from one to two workers (two shards), its workers asking for a
// slot when `slot`.
json ElasticJob(bool slot, const std::string& failpoints) {
  json job = testing::FaultJob(failpoints);
  job["spec"]["replicaSpecs"]["Worker"]["replicas"] = 2;  // the first gang: both
  job["spec"]["elasticPolicy"] = {
      {"minReplicas", 1}, {"maxReplicas", 2}, {"scheduleTimeoutSeconds", 10}};
  if (slot) {
    json& c = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
    c["resources"]["requests"][kSlot] = "1";
    c["resources"]["limits"][kSlot] = "1";
  }
  return job;
}

class Elastic : public testing::JobTest {
 protected:
  void TearDown() override {
    SetSlots(std::nullopt);  // the node as it was, for the binary's next test
    JobTest::TearDown();
  }
  // The node's capacity of kSlot: `n`, or none. The node agent's heartbeat merges its own
  // resources into the status and leaves this one alone.
  void SetSlots(std::optional<int> n) {
    const json value = n ? json(std::to_string(*n)) : json(nullptr);
    PatchOptions status;
    status.subresource = "status";
    auto r = client_->Patch(
        resources::kNodes, "", kNode, PatchType::kMerge,
        {{"status", {{"capacity", {{kSlot, value}}}, {"allocatable", {{kSlot, value}}}}}}, status);
    ASSERT_TRUE(r.ok()) << r.error().message;
  }
  // The job's pod `name` (probes carry the job's label too); none when it is gone.
  std::optional<json> PodNamed(const std::string& name) {
    for (const json& p : Pods(kJob)) {
      if (p["metadata"].value("name", "") == name) return p;
    }
    return std::nullopt;
  }
  // The number of workers in the TF_CONFIG of pod `name`; -1 when it cannot be read.
  int WorkersInTfConfig(const std::string& name) {
    const std::optional<json> pod = PodNamed(name);
    if (!pod) return -1;
    for (const json& e : (*pod)["spec"]["containers"][0].value("env", json::array())) {
      if (e.value("name", "") == "TF_CONFIG") {
        return static_cast<int>(json::parse(e.value("value", "{}"))["cluster"]["worker"].size());
      }
    }
    return -1;
  }
};

TEST_F(Elastic, AGangThatOnlyHalfFitsGoesOnWithOneWorkerAndGrowsBackWithEqualWeights) {
  const std::string reference = ReferenceSha(ElasticJob(false, ""), kFinishTimeout);
  ASSERT_EQ(reference.size(), 64u);

  SetSlots(1);
  ASSERT_TRUE(
      client_->Create(api::kTrainingJobs, ns_, ElasticJob(true, testing::PaceFailpoint(kPaceMs)))
          .ok());
  // Worker 1 finds no node; 10 s later the gang goes on with worker 0 alone.
  json job;
  ASSERT_TRUE(Eventually(
      [&] {
        job = Get(kJob);
        return testing::StatusOf(job).elastic_workers == 1;
      },
      seconds(120)))
      << job.dump(2) << Kubectl(cluster_, "-n " + ns_ + " get pods -o wide");
  api::TrainingJobStatus st = testing::StatusOf(job);
  EXPECT_EQ(st.restart_count, 1);
  EXPECT_EQ(st.restarts.by_cause["Resized"], 1);
  EXPECT_EQ(st.restarts.backoff_limit_used, 0);
  ASSERT_TRUE(Eventually([&] { return !EventMessages("GangResized").empty(); }, seconds(30)));
  const std::string shrink = EventMessages("GangResized").front();
  // Either worker may be the one the scheduler placed.
  EXPECT_NE(shrink.find(" found no node in 10s"), std::string::npos) << shrink;
  EXPECT_NE(shrink.find("1 of the gang's 2 pods were placed"), std::string::npos) << shrink;
  EXPECT_NE(shrink.find(kSlot), std::string::npos) << shrink;  // the scheduler's words
  EXPECT_NE(shrink.find("restarting the gang with 1 of its 2 workers"), std::string::npos)
      << shrink;

  // One worker trains (its TF_CONFIG lists one) and backs up; the probe for the second waits.
  const json backup = FirstBackup(kChief, kStartTimeout);
  ASSERT_FALSE(backup.is_null());
  EXPECT_EQ(WorkersInTfConfig(kChief), 1);
  std::optional<json> probe;
  ASSERT_TRUE(Eventually([&] { return (probe = PodNamed(kProbe)).has_value(); }, seconds(30)))
      << Kubectl(cluster_, "-n " + ns_ + " get pods -o wide");
  EXPECT_EQ((*probe)["spec"].value("nodeName", ""), "") << "no room yet";
  EXPECT_EQ(testing::StatusOf(Get(kJob)).restart_count, 1);

  // Room for the second worker: the probe is placed and the gang grows back to two.
  SetSlots(2);
  ASSERT_TRUE(Eventually(
      [&] {
        job = Get(kJob);
        return testing::StatusOf(job).elastic_workers == 2;
      },
      seconds(60)))
      << job.dump(2) << Kubectl(cluster_, "-n " + ns_ + " get pods -o wide");
  st = testing::StatusOf(job);
  EXPECT_EQ(st.restart_count, 2);
  EXPECT_EQ(st.restarts.by_cause["Resized"], 2);
  EXPECT_TRUE(Eventually([&] { return EventMessages("GangResized").size() >= 2; }, seconds(30)));
  ASSERT_TRUE(Eventually([&] { return WorkersInTfConfig("fmnist-worker-1") == 2; }, seconds(60)))
      << Kubectl(cluster_, "-n " + ns_ + " get pods -o wide");

  ExpectSucceededWithReferenceWeights(kJob, kChief, reference, 2, kFinishTimeout,
                                      /*expect_no_trainer_left=*/true);
  // The last gang resumed from the backup the single worker wrote, at two workers.
  const std::vector<json> restored = PodEvents(kChief, "restored");
  ASSERT_FALSE(restored.empty()) << PodLog(kChief);
  EXPECT_EQ(testing::StatusOf(Get(kJob)).restarts.backoff_limit_used, 0);
  EXPECT_TRUE(Eventually([&] { return !PodNamed(kProbe).has_value(); }, seconds(30)))
      << "the probe outlived the growth";
}

}  // namespace
}  // namespace tj::kube
