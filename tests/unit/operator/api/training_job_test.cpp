// TrainingJob spec parsing: defaults, and one table row per validation rule (the message
// must name the field).
#include "operator/api/training_job.h"

#include <gtest/gtest.h>

namespace tj::api {
namespace {

using nlohmann::json;

json Template() {
  return {
      {"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", "tj-trainer"}}})}}}};
}

json MinimalSpec() { return {{"replicaSpecs", {{"Worker", {{"template", Template()}}}}}}; }

TEST(ParseSpec, Defaults) {
  auto s = ParseSpec(MinimalSpec());
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->Replicas(ReplicaType::kWorker), 1);
  EXPECT_EQ(s->Replicas(ReplicaType::kChief), 0);
  EXPECT_EQ(s->replica_specs.at(ReplicaType::kWorker).restart_policy, RestartPolicy::kExitCode);
  EXPECT_EQ(s->run_policy.backoff_limit, 3);
  EXPECT_EQ(s->run_policy.clean_pod_policy, CleanPodPolicy::kRunning);
  EXPECT_FALSE(s->run_policy.suspend);
  EXPECT_FALSE(s->run_policy.active_deadline_seconds);
  EXPECT_FALSE(s->run_policy.ttl_seconds_after_finished);
  EXPECT_FALSE(s->run_policy.startup_deadline_seconds);
  EXPECT_EQ(s->success_policy, SuccessPolicy::kChief);
  EXPECT_EQ(s->port, 2222);
  EXPECT_EQ(s->run_policy.scheduling_policy.gang, GangScheduler::kAuto);
  EXPECT_FALSE(s->run_policy.scheduling_policy.min_available);
}

TEST(ParseSpec, SchedulingPolicy) {
  json spec = MinimalSpec();
  spec["replicaSpecs"]["Worker"]["replicas"] = 3;
  spec["replicaSpecs"]["Chief"] = {{"replicas", 1}, {"template", Template()}};
  spec["runPolicy"]["schedulingPolicy"] = {{"gang", "Volcano"},
                                           {"minAvailable", 4},
                                           {"queue", "research"},
                                           {"priorityClass", "high"},
                                           {"scheduleTimeoutSeconds", 60}};
  auto s = ParseSpec(spec);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const SchedulingPolicy& p = s->run_policy.scheduling_policy;
  EXPECT_EQ(p.gang, GangScheduler::kVolcano);
  EXPECT_EQ(p.min_available, 4);
  EXPECT_EQ(p.queue, "research");
  EXPECT_EQ(p.priority_class, "high");
  EXPECT_EQ(p.schedule_timeout_seconds, 60);
  for (const char* g : {"Auto", "None", "Coscheduling"}) {
    spec["runPolicy"]["schedulingPolicy"] = {{"gang", g}};
    auto parsed = ParseSpec(spec);
    ASSERT_TRUE(parsed.ok()) << g;
    EXPECT_EQ(ToString(parsed->run_policy.scheduling_policy.gang), g);
  }
}

TEST(ParseSpec, FullSpec) {
  json spec = MinimalSpec();
  spec["replicaSpecs"]["Worker"]["replicas"] = 3;
  spec["replicaSpecs"]["Worker"]["restartPolicy"] = "OnFailure";
  spec["replicaSpecs"]["Chief"] = {{"replicas", 1}, {"template", Template()}};
  spec["replicaSpecs"]["Evaluator"] = {
      {"replicas", 1}, {"restartPolicy", "Never"}, {"template", Template()}};
  spec["runPolicy"] = {{"backoffLimit", 0},
                       {"activeDeadlineSeconds", 60},
                       {"ttlSecondsAfterFinished", 0},
                       {"cleanPodPolicy", "All"},
                       {"suspend", true},
                       {"startupDeadlineSeconds", 30}};
  spec["successPolicy"] = "AllWorkers";
  spec["port"] = 3000;
  auto s = ParseSpec(spec);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->Replicas(ReplicaType::kWorker), 3);
  EXPECT_EQ(s->Replicas(ReplicaType::kChief), 1);
  EXPECT_EQ(s->Replicas(ReplicaType::kEvaluator), 1);
  EXPECT_EQ(s->replica_specs.at(ReplicaType::kWorker).restart_policy, RestartPolicy::kOnFailure);
  EXPECT_EQ(s->replica_specs.at(ReplicaType::kEvaluator).restart_policy, RestartPolicy::kNever);
  EXPECT_EQ(s->run_policy.backoff_limit, 0);
  EXPECT_EQ(*s->run_policy.active_deadline_seconds, 60);
  EXPECT_EQ(*s->run_policy.ttl_seconds_after_finished, 0);
  EXPECT_EQ(*s->run_policy.startup_deadline_seconds, 30);
  EXPECT_EQ(s->run_policy.clean_pod_policy, CleanPodPolicy::kAll);
  EXPECT_TRUE(s->run_policy.suspend);
  EXPECT_EQ(s->success_policy, SuccessPolicy::kAllWorkers);
  EXPECT_EQ(s->port, 3000);
}

// TFJob's convention: the container named "tensorflow" gets TF_CONFIG, beside any sidecar.
TEST(ParseSpec, TensorflowContainerBesideASidecarIsValid) {
  json spec = MinimalSpec();
  auto& cs = spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"];
  cs[0]["name"] = "tensorflow";
  cs.push_back({{"name", "log-shipper"}, {"image", "fluent-bit"}});
  auto s = ParseSpec(spec);
  EXPECT_TRUE(s.ok()) << s.status().message();
}

struct InvalidCase {
  std::string name;
  std::function<void(json&)> mutate;
  std::string message;  // a substring of the error
};

class InvalidSpecTest : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidSpecTest, NamesTheField) {
  json spec = MinimalSpec();
  GetParam().mutate(spec);
  auto s = ParseSpec(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(GetParam().message), std::string::npos)
      << s.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Rules, InvalidSpecTest,
    ::testing::Values(
        InvalidCase{"NotAnObject", [](json& s) { s = "x"; }, "spec: required"},
        InvalidCase{"NoReplicaSpecs", [](json& s) { s.erase("replicaSpecs"); },
                    "spec.replicaSpecs: required"},
        InvalidCase{"NoWorker",
                    [](json& s) {
                      s["replicaSpecs"]["Chief"] = s["replicaSpecs"]["Worker"];
                      s["replicaSpecs"].erase("Worker");
                    },
                    "spec.replicaSpecs.Worker: required"},
        InvalidCase{"UnknownType", [](json& s) { s["replicaSpecs"]["Ps"] = json::object(); },
                    "spec.replicaSpecs.Ps: unknown replica type"},
        InvalidCase{"ParameterServers", [](json& s) { s["replicaSpecs"]["PS"] = json::object(); },
                    "spec.replicaSpecs.PS: parameter servers (TensorFlow's "
                    "ParameterServerStrategy) are not supported: use Worker replicas with "
                    "MultiWorkerMirroredStrategy"},
        InvalidCase{"TfJobMaster",
                    [](json& s) { s["replicaSpecs"]["Master"] = s["replicaSpecs"]["Worker"]; },
                    "spec.replicaSpecs.Master: TFJob's Master is not a replica type here: "
                    "rename it to Chief"},
        InvalidCase{"ZeroWorkers", [](json& s) { s["replicaSpecs"]["Worker"]["replicas"] = 0; },
                    "spec.replicaSpecs.Worker.replicas: must be >= 1"},
        InvalidCase{"NegativeWorkers",
                    [](json& s) { s["replicaSpecs"]["Worker"]["replicas"] = -2; },
                    "spec.replicaSpecs.Worker.replicas: must be >= 1"},
        InvalidCase{"StringReplicas",
                    [](json& s) { s["replicaSpecs"]["Worker"]["replicas"] = "2"; },
                    "spec.replicaSpecs.Worker.replicas: must be an integer"},
        InvalidCase{"TwoChiefs",
                    [](json& s) {
                      s["replicaSpecs"]["Chief"] = {{"replicas", 2}, {"template", Template()}};
                    },
                    "spec.replicaSpecs.Chief.replicas: must be <= 1"},
        InvalidCase{"TwoEvaluators",
                    [](json& s) {
                      s["replicaSpecs"]["Evaluator"] = {{"replicas", 2}, {"template", Template()}};
                    },
                    "spec.replicaSpecs.Evaluator.replicas: must be <= 1"},
        InvalidCase{"BadRestartPolicy",
                    [](json& s) { s["replicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"; },
                    "spec.replicaSpecs.Worker.restartPolicy: unsupported value \"Sometimes\""},
        InvalidCase{"NoTemplate", [](json& s) { s["replicaSpecs"]["Worker"].erase("template"); },
                    "spec.replicaSpecs.Worker.template: required"},
        InvalidCase{"NoContainers",
                    [](json& s) {
                      s["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] = json::array();
                    },
                    "spec.replicaSpecs.Worker.template.spec.containers: must list"},
        InvalidCase{"ContainerWithoutImage",
                    [](json& s) {
                      s["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].erase(
                          "image");
                    },
                    "spec.replicaSpecs.Worker.template.spec.containers[0].image: required"},
        InvalidCase{"TwoContainersNoTrainer",
                    [](json& s) {
                      auto& cs = s["replicaSpecs"]["Worker"]["template"]["spec"]["containers"];
                      cs[0]["name"] = "a";
                      cs.push_back({{"name", "b"}, {"image", "x"}});
                    },
                    "one must be named \"tensorflow\" or \"trainer\""},
        InvalidCase{"NegativeBackoff", [](json& s) { s["runPolicy"]["backoffLimit"] = -1; },
                    "spec.runPolicy.backoffLimit: must be >= 0"},
        InvalidCase{"ZeroDeadline", [](json& s) { s["runPolicy"]["activeDeadlineSeconds"] = 0; },
                    "spec.runPolicy.activeDeadlineSeconds: must be >= 1"},
        InvalidCase{"NegativeTtl", [](json& s) { s["runPolicy"]["ttlSecondsAfterFinished"] = -5; },
                    "spec.runPolicy.ttlSecondsAfterFinished: must be >= 0"},
        InvalidCase{"ZeroStartup", [](json& s) { s["runPolicy"]["startupDeadlineSeconds"] = 0; },
                    "spec.runPolicy.startupDeadlineSeconds: must be >= 1"},
        InvalidCase{"BadCleanPodPolicy", [](json& s) { s["runPolicy"]["cleanPodPolicy"] = "Some"; },
                    "spec.runPolicy.cleanPodPolicy: unsupported value"},
        InvalidCase{"SuspendNotBool", [](json& s) { s["runPolicy"]["suspend"] = "yes"; },
                    "spec.runPolicy.suspend: must be a boolean"},
        InvalidCase{"BadGang",
                    [](json& s) { s["runPolicy"]["schedulingPolicy"]["gang"] = "Kueue"; },
                    "spec.runPolicy.schedulingPolicy.gang: unsupported value"},
        InvalidCase{"MinAvailableOverTheGang",
                    [](json& s) { s["runPolicy"]["schedulingPolicy"]["minAvailable"] = 2; },
                    "spec.runPolicy.schedulingPolicy.minAvailable: must be <= 1"},
        InvalidCase{"QueueNotString",
                    [](json& s) { s["runPolicy"]["schedulingPolicy"]["queue"] = 3; },
                    "spec.runPolicy.schedulingPolicy.queue: must be a string"},
        InvalidCase{"SchedulingPolicyNotObject",
                    [](json& s) { s["runPolicy"]["schedulingPolicy"] = "Volcano"; },
                    "spec.runPolicy.schedulingPolicy: must be an object"},
        InvalidCase{"BadSuccessPolicy", [](json& s) { s["successPolicy"] = "Evaluator"; },
                    "spec.successPolicy: unsupported value"},
        InvalidCase{"PortZero", [](json& s) { s["port"] = 0; }, "spec.port: must be >= 1"},
        InvalidCase{"PortTooBig", [](json& s) { s["port"] = 70000; },
                    "spec.port: must be <= 65535"},
        InvalidCase{"RunPolicyNotObject", [](json& s) { s["runPolicy"] = 3; },
                    "spec.runPolicy: must be an object"}),
    [](const ::testing::TestParamInfo<InvalidCase>& i) { return i.param.name; });

TEST(Status, RoundTripsAndKeepsState) {
  TrainingJobStatus s;
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  EXPECT_TRUE(s.SetCondition(condition::kCreated, true, "JobCreated", "m", now));
  EXPECT_FALSE(s.SetCondition(condition::kCreated, true, "JobCreated", "m", now));
  EXPECT_FALSE(s.SetCondition(condition::kRestarting, false, "X", "never held", now));
  EXPECT_EQ(s.state, "Created");
  EXPECT_TRUE(s.SetCondition(condition::kRunning, true, "JobRunning", "m", now));
  EXPECT_EQ(s.state, "Running");
  s.restart_count = 2;
  s.created_generation = 2;
  s.start_time = "2023-11-14T22:13:20Z";
  s.replica_statuses["Worker"] = {2, 0, 0};
  s.progress = {{"epoch", 1}};
  json j = s.ToJson();
  EXPECT_EQ(j["state"], "Running");
  TrainingJobStatus back = TrainingJobStatus::FromJson(j);
  EXPECT_EQ(back.ToJson(), j);
  EXPECT_EQ(back.restart_count, 2);
  EXPECT_TRUE(back.IsTrue(condition::kRunning));
  EXPECT_FALSE(back.Finished());
}

TEST(Status, TransitionTimeChangesOnlyOnFlip) {
  TrainingJobStatus s;
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  const auto t1 = t0 + std::chrono::seconds(10);
  const auto t2 = t0 + std::chrono::seconds(20);
  s.SetCondition(condition::kRestarting, true, "GangRestart", "restart 1", t0);
  s.SetCondition(condition::kRestarting, true, "GangRestart", "restart 2", t1);
  EXPECT_EQ(s.Find(condition::kRestarting)->last_transition_time, kube::FormatTime(t0));
  EXPECT_EQ(s.Find(condition::kRestarting)->last_update_time, kube::FormatTime(t1));
  s.SetCondition(condition::kRestarting, false, "JobRunning", "ok", t2);
  EXPECT_EQ(s.Find(condition::kRestarting)->last_transition_time, kube::FormatTime(t2));
}

// API conventions: lastTransitionTime is the time `status` last changed; a new message, reason or
// spec generation alone keeps it (and moves lastUpdateTime); every condition set carries the
// generation it was set from, and so does the status.
TEST(Status, ANewMessageReasonOrGenerationKeepsTheTransitionTime) {
  TrainingJobStatus s;
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  s.observed_generation = 1;
  ASSERT_TRUE(s.SetCondition(condition::kRunning, true, "JobRunning", "pods running", t0));
  EXPECT_EQ(s.Find(condition::kRunning)->observed_generation, 1);

  ASSERT_TRUE(s.SetCondition(condition::kRunning, true, "JobRunning", "epoch 2",
                             t0 + std::chrono::seconds(1)));
  ASSERT_TRUE(s.SetCondition(condition::kRunning, true, "WaitingForEvaluator", "epoch 2",
                             t0 + std::chrono::seconds(2)));
  s.observed_generation = 2;  // the spec changed (say, suspend toggled), the state did not
  ASSERT_TRUE(s.SetCondition(condition::kRunning, true, "WaitingForEvaluator", "epoch 2",
                             t0 + std::chrono::seconds(3)));
  const Condition* c = s.Find(condition::kRunning);
  EXPECT_EQ(c->last_transition_time, kube::FormatTime(t0));
  EXPECT_EQ(c->last_update_time, kube::FormatTime(t0 + std::chrono::seconds(3)));
  EXPECT_EQ(c->observed_generation, 2);
  // Nothing new: nothing written.
  EXPECT_FALSE(s.SetCondition(condition::kRunning, true, "WaitingForEvaluator", "epoch 2",
                              t0 + std::chrono::seconds(4)));
  EXPECT_EQ(s.Find(condition::kRunning)->last_update_time,
            kube::FormatTime(t0 + std::chrono::seconds(3)));

  const json j = s.ToJson();
  EXPECT_EQ(j["observedGeneration"], 2);
  ASSERT_EQ(j["conditions"].size(), 1u);
  EXPECT_EQ(j["conditions"][0]["observedGeneration"], 2);
  EXPECT_EQ(j["conditions"][0]["lastTransitionTime"], kube::FormatTime(t0));
  EXPECT_EQ(TrainingJobStatus::FromJson(j).ToJson(), j);
}

// A condition that never held is not written as False (kubectl wait --for=condition=Succeeded
// then waits on an absent condition, as for any other object); one that held flips to False.
TEST(Status, AFalseConditionIsWrittenOnlyOnceItHeld) {
  TrainingJobStatus s;
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  EXPECT_FALSE(s.SetCondition(condition::kRestarting, false, "JobRunning", "ok", t0));
  EXPECT_EQ(s.Find(condition::kRestarting), nullptr);
  ASSERT_TRUE(s.SetCondition(condition::kSucceeded, true, "JobSucceeded", "done", t0));
  EXPECT_EQ(s.state, condition::kSucceeded);
  EXPECT_TRUE(s.Finished());
}

TEST(Status, MalformedFieldsAreDropped) {
  json j = {{"conditions", "nope"}, {"restartCount", "x"}, {"replicaStatuses", {{"Worker", 3}}}};
  TrainingJobStatus s = TrainingJobStatus::FromJson(j);
  EXPECT_TRUE(s.conditions.empty());
  EXPECT_EQ(s.restart_count, 0);
  EXPECT_TRUE(s.replica_statuses.empty());
  EXPECT_TRUE(TrainingJobStatus::FromJson("garbage").conditions.empty());
}

TEST(ReplicaTypes, Names) {
  EXPECT_EQ(ToString(ReplicaType::kWorker), "Worker");
  EXPECT_EQ(TaskName(ReplicaType::kEvaluator), "evaluator");
  EXPECT_EQ(ParseReplicaType("chief"), ReplicaType::kChief);
  EXPECT_EQ(ParseReplicaType("Worker"), ReplicaType::kWorker);
  EXPECT_FALSE(ParseReplicaType("ps"));
}

}  // namespace
}  // namespace tj::api

namespace tj::api {
namespace {

// The names the operator derives from a job's name must be valid where they are used.
TEST(ValidateJobName, ServiceLabelAndHostnameLimits) {
  auto spec = ParseSpec(nlohmann::json{
      {"replicaSpecs",
       {{"Worker",
         {{"replicas", 10},
          {"template", {{"spec", {{"containers", {{{"name", "trainer"}, {"image", "t"}}}}}}}}}}}}});
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_TRUE(ValidateJobName("mnist", *spec).ok());
  EXPECT_TRUE(ValidateJobName(std::string(52, 'a'), *spec).ok());  // a-worker-9: 52 + 9 = 61
  struct Case {
    std::string name, message;
  } cases[] = {
      {std::string(64, 'a'), "has 64 characters: the job's Service and its label"},
      {std::string(55, 'a'), "hostname \"" + std::string(55, 'a') + "-worker-9\" of 64"},
      {"my.job", "is not a DNS-1035 label"},
      {"9lives", "is not a DNS-1035 label"},
      {"Mnist", "is not a DNS-1035 label"},
      {"mnist-", "is not a DNS-1035 label"},
      {"", "has 0 characters"},
  };
  for (const Case& c : cases) {
    Status s = ValidateJobName(c.name, *spec);
    ASSERT_FALSE(s.ok()) << c.name;
    EXPECT_NE(s.message().find("metadata.name: "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace tj::api

namespace tj::api {
namespace {

// A duration is added to times on the system clock (nanoseconds, 292 years either side of
// 1970): no value the API server lets through may wrap it. Larger ones mean "never".
TEST(ParseSpec, DurationsSaturateOrAreRefusedNeverWrap) {
  const char* fields[] = {"activeDeadlineSeconds", "ttlSecondsAfterFinished",
                          "startupDeadlineSeconds"};
  auto parse = [](const char* field, const json& value) {
    json spec = MinimalSpec();
    spec["runPolicy"][field] = value;
    return ParseSpec(spec);
  };
  auto of = [](const TrainingJobSpec& s, const std::string& field) {
    if (field == "activeDeadlineSeconds") return s.run_policy.active_deadline_seconds;
    if (field == "ttlSecondsAfterFinished") return s.run_policy.ttl_seconds_after_finished;
    return s.run_policy.startup_deadline_seconds;
  };
  for (const char* f : fields) {
    SCOPED_TRACE(f);
    for (const json& huge : {json(INT64_MAX), json(uint64_t{UINT64_MAX}), json(uint64_t{1} << 63),
                             json(kMaxDurationSeconds + 1)}) {
      auto s = parse(f, huge);
      ASSERT_TRUE(s.ok()) << huge << ": " << s.status().message();
      EXPECT_EQ(of(*s, f), kMaxDurationSeconds) << huge;
    }
    auto exact = parse(f, 3600);
    ASSERT_TRUE(exact.ok());
    EXPECT_EQ(of(*exact, f), 3600);
    for (const json& bad : {json(-1), json(INT64_MIN), json(1e300), json(-1e300), json(3600.5),
                            json("3600"), json(true)}) {
      auto s = parse(f, bad);
      ASSERT_FALSE(s.ok()) << bad;
      EXPECT_EQ(s.status().message().rfind(std::string("spec.runPolicy.") + f + ": must be ", 0),
                0u)
          << s.status().message();
    }
  }
  // 100 years from the latest time a status can hold still fits the clock.
  const auto latest =
      std::chrono::system_clock::time_point::max() - std::chrono::seconds(kMaxDurationSeconds);
  EXPECT_GT(latest.time_since_epoch(), std::chrono::hours(24 * 365) * 150);
}

// JSON allows integers over INT64_MAX; they must be refused, not wrapped to a negative number.
TEST(ParseSpec, IntegersOverInt64AreRefusedNotWrapped) {
  json spec = MinimalSpec();
  spec["runPolicy"]["backoffLimit"] = uint64_t{UINT64_MAX};
  auto s = ParseSpec(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "spec.runPolicy.backoffLimit: must be <= 1000000");
  spec = MinimalSpec();
  spec["replicaSpecs"]["Worker"]["replicas"] = uint64_t{1} << 63;
  s = ParseSpec(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "spec.replicaSpecs.Worker.replicas: must be <= " + std::to_string(kMaxWorkers));
}

// The executor's question before a pass, read from the conditions alone: the same answer as
// the parsed status's Finished(), and false for whatever else a status holds.
TEST(TrainingJobStatus, FinishedInReadsTheConditionsAsFinishedDoes) {
  const auto job_with = [](nlohmann::json conditions) {
    return nlohmann::json{{"status", {{"conditions", std::move(conditions)}}}};
  };
  for (const char* type : {condition::kSucceeded, condition::kFailed}) {
    const nlohmann::json done = job_with({{{"type", condition::kRunning}, {"status", "False"}},
                                          {{"type", type}, {"status", "True"}}});
    EXPECT_TRUE(TrainingJobStatus::FinishedIn(done)) << type;
    EXPECT_TRUE(TrainingJobStatus::FromJson(done["status"]).Finished()) << type;
    const nlohmann::json not_yet = job_with({{{"type", type}, {"status", "False"}}});
    EXPECT_FALSE(TrainingJobStatus::FinishedIn(not_yet)) << type;
    EXPECT_FALSE(TrainingJobStatus::FromJson(not_yet["status"]).Finished()) << type;
  }
  EXPECT_FALSE(
      TrainingJobStatus::FinishedIn(job_with({{{"type", "Running"}, {"status", "True"}}})));
  for (const nlohmann::json& odd :
       {nlohmann::json(), nlohmann::json::array(), nlohmann::json{{"status", "done"}},
        nlohmann::json{{"status", {{"conditions", "Succeeded"}}}},
        job_with({"Succeeded", 1, nullptr, {{"type", 7}, {"status", true}}})}) {
    EXPECT_FALSE(TrainingJobStatus::FinishedIn(odd)) << odd.dump();
  }
}

}  // namespace
}  // namespace tj::api
