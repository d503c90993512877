// The bad-TrainingJob table: hand-written invalid jobs and the exact message a user sees for
// each, as the job's Failed condition (reason InvalidSpec) and as a Warning Event. The same
// rows are rendered in docs/reliability.md ("## Bad TrainingJobs"), which also says what the
// CRD schema refuses first at `kubectl apply`; DocumentedInReliabilityMd keeps the two equal.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "operator/api/training_job.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler.h"
#include "tests/support/temp_dir.h"

namespace tj::api {
namespace {

using nlohmann::json;

json Container() {
  return {{"name", "trainer"},
          {"image", "ghcr.io/tjo-dev/tj-trainer:latest"},
          {"args", json::array({"--epochs", "3"})},
          {"volumeMounts", json::array({{{"name", "data"}, {"mountPath", "/data"}}})}};
}

json Replica(int replicas) {
  return {{"replicas", replicas},
          {"template",
           {{"spec",
             {{"containers", json::array({Container()})},
              {"volumes",
               json::array({{{"name", "data"},
                             {"persistentVolumeClaim", {{"claimName", "fmnist-data"}}}}})}}}}}};
}

// manifests/examples/fmnist.yaml's job in short: 2 workers and an evaluator on a claim.
json ValidJob() {
  return {{"apiVersion", kApiVersion},
          {"kind", kKind},
          {"metadata", {{"name", "fmnist"}, {"namespace", "default"}, {"uid", "u-1"}}},
          {"spec",
           {{"replicaSpecs", {{"Worker", Replica(2)}, {"Evaluator", Replica(1)}}},
            {"runPolicy", {{"backoffLimit", 3}}}}}};
}

json& Worker(json& job) { return job["spec"]["replicaSpecs"]["Worker"]; }
json& WorkerContainers(json& job) { return Worker(job)["template"]["spec"]["containers"]; }

struct BadJob {
  std::string name;
  std::function<void(json&)> mutate;
  std::string message;  // exactly what ParseSpec says
};

const std::vector<BadJob>& Table() {
  static const std::vector<BadJob> rows = {
      {"NoSpec", [](json& j) { j.erase("spec"); }, "spec: required: an object with replicaSpecs"},
      {"SpecNotAnObject", [](json& j) { j["spec"] = "2 workers"; },
       "spec: required: an object with replicaSpecs"},
      {"NoReplicaSpecs", [](json& j) { j["spec"].erase("replicaSpecs"); },
       "spec.replicaSpecs: required: an object keyed by replica type (Worker)"},
      {"ReplicaSpecsAList", [](json& j) { j["spec"]["replicaSpecs"] = json::array({Replica(2)}); },
       "spec.replicaSpecs: required: an object keyed by replica type (Worker)"},
      {"NoWorker", [](json& j) { j["spec"]["replicaSpecs"].erase("Worker"); },
       "spec.replicaSpecs.Worker: required: a job needs at least one worker"},
      {"UnknownReplicaType", [](json& j) { j["spec"]["replicaSpecs"]["Evaluater"] = Replica(1); },
       "spec.replicaSpecs.Evaluater: unknown replica type: must be one of Chief, Worker, "
       "Evaluator"},
      {"LowercaseReplicaType",
       [](json& j) {
         j["spec"]["replicaSpecs"]["worker"] = Worker(j);
         j["spec"]["replicaSpecs"].erase("Worker");
       },
       "spec.replicaSpecs.worker: unknown replica type: must be one of Chief, Worker, "
       "Evaluator"},
      {"ReplicaSpecNotAnObject", [](json& j) { Worker(j) = 2; },
       "spec.replicaSpecs.Worker: must be an object with replicas and template"},
      {"ReplicasAString", [](json& j) { Worker(j)["replicas"] = "2"; },
       "spec.replicaSpecs.Worker.replicas: must be an integer"},
      {"ReplicasAFraction", [](json& j) { Worker(j)["replicas"] = 1.5; },
       "spec.replicaSpecs.Worker.replicas: must be an integer"},
      {"ZeroWorkers", [](json& j) { Worker(j)["replicas"] = 0; },
       "spec.replicaSpecs.Worker.replicas: must be >= 1"},
      {"NegativeWorkers", [](json& j) { Worker(j)["replicas"] = -3; },
       "spec.replicaSpecs.Worker.replicas: must be >= 1"},
      {"AbsurdWorkers", [](json& j) { Worker(j)["replicas"] = 1000000; },
       "spec.replicaSpecs.Worker.replicas: must be <= 512"},
      {"WorkersBeyondInt64", [](json& j) { Worker(j)["replicas"] = 1e30; },
       "spec.replicaSpecs.Worker.replicas: must be an integer"},
      {"TwoEvaluators", [](json& j) { j["spec"]["replicaSpecs"]["Evaluator"]["replicas"] = 2; },
       "spec.replicaSpecs.Evaluator.replicas: must be <= 1"},
      {"TwoChiefs", [](json& j) { j["spec"]["replicaSpecs"]["Chief"] = Replica(2); },
       "spec.replicaSpecs.Chief.replicas: must be <= 1"},
      {"UnknownRestartPolicy", [](json& j) { Worker(j)["restartPolicy"] = "Sometimes"; },
       "spec.replicaSpecs.Worker.restartPolicy: unsupported value \"Sometimes\": must be one of "
       "Never, OnFailure, ExitCode, Always"},
      {"RestartPolicyNotAString", [](json& j) { Worker(j)["restartPolicy"] = true; },
       "spec.replicaSpecs.Worker.restartPolicy: must be one of Never, OnFailure, ExitCode, "
       "Always"},
      {"NoTemplate", [](json& j) { Worker(j).erase("template"); },
       "spec.replicaSpecs.Worker.template: required: a pod template with spec.containers"},
      {"TemplateWithoutSpec", [](json& j) { Worker(j)["template"].erase("spec"); },
       "spec.replicaSpecs.Worker.template.spec: required: a pod spec with containers"},
      {"NoContainers", [](json& j) { Worker(j)["template"]["spec"].erase("containers"); },
       "spec.replicaSpecs.Worker.template.spec.containers: must list at least one container"},
      {"EmptyContainers", [](json& j) { WorkerContainers(j) = json::array(); },
       "spec.replicaSpecs.Worker.template.spec.containers: must list at least one container"},
      {"ContainersAnObject", [](json& j) { WorkerContainers(j) = Container(); },
       "spec.replicaSpecs.Worker.template.spec.containers: must list at least one container"},
      {"ContainerAString", [](json& j) { WorkerContainers(j)[0] = "tj-trainer"; },
       "spec.replicaSpecs.Worker.template.spec.containers[0]: must be a container object"},
      {"ContainerWithoutName", [](json& j) { WorkerContainers(j)[0].erase("name"); },
       "spec.replicaSpecs.Worker.template.spec.containers[0].name: required: a non-empty "
       "container name"},
      {"ContainerWithoutImage", [](json& j) { WorkerContainers(j)[0].erase("image"); },
       "spec.replicaSpecs.Worker.template.spec.containers[0].image: required: the image to run "
       "(the tj-trainer image)"},
      {"ArgsAString", [](json& j) { WorkerContainers(j)[0]["args"] = "--epochs 3"; },
       "spec.replicaSpecs.Worker.template.spec.containers[0].args: must be a list of strings"},
      {"EnvAnObject",
       [](json& j) {
         WorkerContainers(j)[0]["env"] = {{"A", "1"}};
       },
       "spec.replicaSpecs.Worker.template.spec.containers[0].env: must be a list of {name, "
       "value} objects"},
      {"TwoContainersNoneNamedTrainer",
       [](json& j) {
         WorkerContainers(j)[0]["name"] = "main";
         WorkerContainers(j).push_back({{"name", "sidecar"}, {"image", "busybox"}});
       },
       "spec.replicaSpecs.Worker.template.spec.containers: with several containers, one must be "
       "named \"tensorflow\" or \"trainer\" (it gets TF_CONFIG)"},
      {"RunPolicyAList", [](json& j) { j["spec"]["runPolicy"] = json::array(); },
       "spec.runPolicy: must be an object"},
      {"NegativeBackoffLimit", [](json& j) { j["spec"]["runPolicy"]["backoffLimit"] = -1; },
       "spec.runPolicy.backoffLimit: must be >= 0"},
      {"AbsurdBackoffLimit", [](json& j) { j["spec"]["runPolicy"]["backoffLimit"] = 2000000000; },
       "spec.runPolicy.backoffLimit: must be <= 1000000"},
      {"BackoffLimitAString", [](json& j) { j["spec"]["runPolicy"]["backoffLimit"] = "3"; },
       "spec.runPolicy.backoffLimit: must be an integer"},
      {"ZeroActiveDeadline", [](json& j) { j["spec"]["runPolicy"]["activeDeadlineSeconds"] = 0; },
       "spec.runPolicy.activeDeadlineSeconds: must be >= 1"},
      {"NegativeTtl", [](json& j) { j["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = -1; },
       "spec.runPolicy.ttlSecondsAfterFinished: must be >= 0"},
      {"ZeroStartupDeadline", [](json& j) { j["spec"]["runPolicy"]["startupDeadlineSeconds"] = 0; },
       "spec.runPolicy.startupDeadlineSeconds: must be >= 1"},
      {"UnknownCleanPodPolicy",
       [](json& j) { j["spec"]["runPolicy"]["cleanPodPolicy"] = "Finished"; },
       "spec.runPolicy.cleanPodPolicy: unsupported value \"Finished\": must be one of All, "
       "Running, None"},
      {"SuspendAString", [](json& j) { j["spec"]["runPolicy"]["suspend"] = "yes"; },
       "spec.runPolicy.suspend: must be a boolean"},
      {"UnknownSuccessPolicy", [](json& j) { j["spec"]["successPolicy"] = "Evaluator"; },
       "spec.successPolicy: unsupported value \"Evaluator\": must be one of Chief, AllWorkers"},
      {"PortZero", [](json& j) { j["spec"]["port"] = 0; }, "spec.port: must be >= 1"},
      {"PortTooLarge", [](json& j) { j["spec"]["port"] = 70000; }, "spec.port: must be <= 65535"},
      {"PortAString", [](json& j) { j["spec"]["port"] = "2222"; }, "spec.port: must be an integer"},
  };
  return rows;
}

// The condition message (and Event) a user sees for a ParseSpec error `message`.
std::string UserMessage(const std::string& message) {
  return "TrainingJob default/fmnist is invalid: " + message +
         "; fix the spec and re-create the job";
}

class BadTrainingJob : public ::testing::TestWithParam<BadJob> {};

TEST_P(BadTrainingJob, ParseSpecNamesTheFieldExactly) {
  json job = ValidJob();
  GetParam().mutate(job);
  auto s = ParseSpec(job.value("spec", json()));
  ASSERT_FALSE(s.ok()) << "accepted: " << job.dump();
  EXPECT_EQ(s.status().message(), GetParam().message);
}

TEST_P(BadTrainingJob, UserSeesFailedConditionAndWarningEventAndNoPods) {
  json job = ValidJob();
  GetParam().mutate(job);
  controller::Observed in;
  in.job = job;
  in.new_rendezvous_key = "k";
  in.now = kube::WallTime(std::chrono::seconds(1700000000));
  controller::Decision d = controller::Reconcile(in);
  ASSERT_TRUE(d.status.has_value());
  TrainingJobStatus st = TrainingJobStatus::FromJson(*d.status);
  ASSERT_TRUE(st.IsTrue(condition::kFailed)) << d.status->dump();
  EXPECT_EQ(st.Find(condition::kFailed)->reason, "InvalidSpec");
  EXPECT_EQ(st.Find(condition::kFailed)->message, UserMessage(GetParam().message));
  EXPECT_EQ(st.state, "Failed");
  int events = 0;
  for (const auto& a : d.actions) {
    EXPECT_NE(a.kind, controller::Action::Kind::kCreate) << "created " << a.resource.plural;
    if (a.kind == controller::Action::Kind::kEvent) {
      ++events;
      EXPECT_EQ(a.event_type, "Warning");
      EXPECT_EQ(a.reason, "InvalidSpec");
      EXPECT_EQ(a.message, UserMessage(GetParam().message));
    }
  }
  EXPECT_EQ(events, 1);
}

INSTANTIATE_TEST_SUITE_P(Table, BadTrainingJob, ::testing::ValuesIn(Table()),
                         [](const ::testing::TestParamInfo<BadJob>& i) { return i.param.name; });

TEST(BadTrainingJobTable, TheValidJobIsAccepted) {
  auto s = ParseSpec(ValidJob()["spec"]);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->Replicas(ReplicaType::kWorker), 2);
}

// A claim that does not exist is valid spec: the pods stay Pending (the scheduler's
// PodScheduled condition says why) and runPolicy.startupDeadlineSeconds ends the job with that
// reason in its message.
TEST(BadTrainingJobTable, MissingClaimFailsAtTheStartupDeadlineNamingTheClaim) {
  json job = ValidJob();
  job["spec"]["runPolicy"]["startupDeadlineSeconds"] = 600;
  job["status"] = {{"createdGeneration", 0}, {"restartCount", 0}, {"rendezvousKeyHash", "h"}};
  const kube::WallTime t0(std::chrono::seconds(1700000000));
  controller::Observed in;
  in.job = job;
  in.now = t0 + std::chrono::seconds(601);
  in.service = json::object();
  const std::string why =
      "0/1 nodes are available: 1 persistentvolumeclaim \"fmnist-data\" "
      "not found.";
  auto spec = ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  for (auto [type, n] : {std::pair{ReplicaType::kWorker, 2}, {ReplicaType::kEvaluator, 1}}) {
    for (int i = 0; i < n; ++i) {
      json pod = controller::BuildPod(job, *spec, type, i, 0);
      pod["metadata"]["creationTimestamp"] = kube::FormatTime(t0);
      pod["status"] = {{"phase", "Pending"},
                       {"conditions", json::array({{{"type", "PodScheduled"},
                                                    {"status", "False"},
                                                    {"reason", "Unschedulable"},
                                                    {"message", why}}})}};
      in.pods.push_back(pod);
    }
  }
  controller::Decision d = controller::Reconcile(in);
  ASSERT_TRUE(d.status.has_value());
  TrainingJobStatus st = TrainingJobStatus::FromJson(*d.status);
  ASSERT_TRUE(st.IsTrue(condition::kFailed)) << d.status->dump();
  EXPECT_EQ(st.Find(condition::kFailed)->reason, "StartupDeadlineExceeded");
  EXPECT_EQ(
      st.Find(condition::kFailed)->message,
      "pod fmnist-worker-0 was not running 600s after it was created (Unschedulable: " + why + ")");
}

// docs/reliability.md renders this table: every row's message is there, in backquotes.
TEST(BadTrainingJobTable, DocumentedInReliabilityMd) {
  const std::string path = std::string(TJ_SOURCE_DIR) + "/docs/reliability.md";
  ASSERT_TRUE(std::filesystem::exists(path))
      << "docs/reliability.md not found under " << TJ_SOURCE_DIR;
  const std::string doc = tj::testing::ReadBytes(path);
  const size_t section = doc.find("\n## Bad TrainingJobs");
  ASSERT_NE(section, std::string::npos) << "docs/reliability.md has no '## Bad TrainingJobs'";
  const std::string table = doc.substr(section, doc.find("\n## ", section + 1) - section);
  for (const BadJob& row : Table()) {
    EXPECT_NE(table.find("`" + row.message + "`"), std::string::npos)
        << "row " << row.name << ": add `" << row.message << "` to the table in "
        << "docs/reliability.md";
  }
}

}  // namespace
}  // namespace tj::api
