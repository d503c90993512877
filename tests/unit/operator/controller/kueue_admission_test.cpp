// Kueue's admission: the Workload built from a job, what a Workload's status says, how an
// admission's flavors reach the pod templates (operator/controller/kueue_admission.h), and the
// admission's rules in a reconcile pass (reconciler_admission.cpp) over Kueue's objects as
// observed: what a pass creates, patches and writes, when the job waits, what it then says,
// when the Workload is marked Finished, how an eviction restarts the gang.
#include "operator/controller/kueue_admission.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kube/object_meta.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/test_job.h"

namespace tj::controller::kueue {
namespace {

using nlohmann::json;

json QueuedJob() {
  json job = TestJob();
  job["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  json& worker = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
  worker["resources"] = {{"requests", {{"cpu", "500m"}, {"memory", "256Mi"}}}};
  job["spec"]["replicaSpecs"]["Evaluator"] = job["spec"]["replicaSpecs"]["Worker"];
  job["spec"]["replicaSpecs"]["Evaluator"]["replicas"] = 1;
  return job;
}

json Condition(const std::string& type, const std::string& status, const std::string& reason = "",
               const std::string& message = "") {
  return {{"type", type}, {"status", status}, {"reason", reason}, {"message", message}};
}

TEST(KueueAdmission, QueueNameIsTheLabel) {
  EXPECT_EQ(QueueName(QueuedJob()), "user-queue");
  EXPECT_EQ(QueueName(TestJob()), "");
}

TEST(KueueAdmission, WorkloadNameIsShortStableAndPerUid) {
  json job = QueuedJob();
  const std::string name = WorkloadName(job);
  EXPECT_EQ(name.rfind("trainingjob-mnist-", 0), 0U) << name;
  EXPECT_EQ(name.size(), std::string("trainingjob-mnist-").size() + 5);
  EXPECT_EQ(WorkloadName(job), name);
  EXPECT_NE(WorkloadName(TestJob("uid-2")), name);
  job["metadata"]["name"] = std::string(253, 'a');
  EXPECT_LE(WorkloadName(job).size(), 63U);
}

TEST(KueueAdmission, TheWorkloadHasOnePodSetPerReplicaTypeWithTheirRequests) {
  const json job = QueuedJob();
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const json wl = BuildWorkload(job, *spec);
  EXPECT_EQ(wl["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(wl["kind"], "Workload");
  EXPECT_EQ(wl["metadata"]["name"], WorkloadName(job));
  EXPECT_EQ(wl["metadata"]["namespace"], "ns");
  EXPECT_EQ(wl["metadata"]["labels"][kJobUidLabel], "uid-1");
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(wl["spec"]["queueName"], "user-queue");
  std::map<std::string, int> counts;
  for (const json& ps : wl["spec"]["podSets"]) {
    counts[ps["name"]] = ps["count"];
    const json& c = ps["template"]["spec"]["containers"][0];
    EXPECT_EQ(c["resources"]["requests"]["cpu"], "500m") << ps.dump();
    EXPECT_FALSE(c.contains("env")) << "only what decides placement: " << c.dump();
    EXPECT_FALSE(c.contains("args")) << c.dump();
  }
  EXPECT_EQ(counts, (std::map<std::string, int>{{"evaluator", 1}, {"worker", 2}}));
}

// What Kueue counts besides the containers' requests reaches the podSets: the pods' DRA claims
// (resourceClaims, and each container's resources.claims), counted by device class where Kueue
// maps classes to resources; pod-level resources and overhead; a sidecar's restartPolicy.
// Before, the claims were dropped and a job whose GPUs come through claims used no quota.
TEST(KueueAdmission, ThePodSetsCarryTheDraClaimsAndWhatElseKueueCounts) {
  json job = QueuedJob();
  json& pod = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"];
  pod["resourceClaims"] =
      json::array({{{"name", "gpu"}, {"resourceClaimTemplateName", "one-gpu"}}});
  pod["containers"][0]["resources"]["claims"] = json::array({{{"name", "gpu"}}});
  pod["resources"] = {{"requests", {{"memory", "1Gi"}}}};
  pod["initContainers"] = json::array(
      {{{"name", "proxy"}, {"image", "p"}, {"restartPolicy", "Always"}, {"args", {"x"}}}});
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const json wl = BuildWorkload(job, *spec);
  const json* worker = nullptr;
  for (const json& ps : wl["spec"]["podSets"]) {
    if (ps["name"] == "worker") worker = &ps["template"]["spec"];
  }
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ((*worker)["resourceClaims"], pod["resourceClaims"]);
  EXPECT_EQ((*worker)["containers"][0]["resources"]["claims"][0]["name"], "gpu");
  EXPECT_EQ((*worker)["resources"]["requests"]["memory"], "1Gi");
  EXPECT_EQ((*worker)["initContainers"][0]["restartPolicy"], "Always");
  EXPECT_FALSE((*worker)["initContainers"][0].contains("args"));
}

TEST(KueueAdmission, StateOfAWaitingWorkloadIsKueuesReason) {
  json wl = {{"status",
              {{"conditions",
                json::array({Condition("QuotaReserved", "False", "Pending",
                                       "couldn't assign flavors to pod set worker: insufficient "
                                       "unused quota for cpu in flavor f, 1 more needed")})}}}};
  WorkloadState s = StateOf(wl);
  EXPECT_FALSE(s.admitted);
  EXPECT_EQ(s.reason, "Pending");
  EXPECT_NE(s.message.find("insufficient unused quota"), std::string::npos);

  // Quota reserved, an admission check not ready: Admitted=False says which.
  wl["status"]["conditions"] = json::array(
      {Condition("QuotaReserved", "True", "QuotaReserved"),
       Condition("Admitted", "False", "NoChecks", "The workload has not all admission checks")});
  s = StateOf(wl);
  EXPECT_FALSE(s.admitted);
  EXPECT_EQ(s.reason, "NoChecks");

  wl["status"]["conditions"] =
      json::array({Condition("QuotaReserved", "True"), Condition("Admitted", "True", "Admitted")});
  wl["status"]["admission"] = {{"clusterQueue", "cq"}};
  s = StateOf(wl);
  EXPECT_TRUE(s.admitted);
  EXPECT_EQ(s.cluster_queue, "cq");
  EXPECT_FALSE(s.finished);

  EXPECT_FALSE(StateOf(json::object()).admitted);
  EXPECT_FALSE(StateOf(json("not an object")).admitted);
}

json Admitted(const json& assignments) {
  return {{"metadata", {{"name", "wl"}, {"namespace", "ns"}}},
          {"status",
           {{"conditions", json::array({Condition("Admitted", "True")})},
            {"admission", {{"clusterQueue", "cq"}, {"podSetAssignments", assignments}}}}}};
}

TEST(KueueAdmission, TheFlavorsNodeLabelsAndTolerationsReachTheTemplates) {
  const json wl = Admitted(json::array(
      {{{"name", "worker"}, {"flavors", {{"cpu", "gpu-a"}, {"memory", "gpu-a"}}}, {"count", 2}},
       {{"name", "evaluator"}, {"flavors", {{"cpu", "plain"}}}, {"count", 1}}}));
  EXPECT_EQ(AssignedFlavors(wl), (std::vector<std::string>{"gpu-a", "plain"}));
  const json toleration = {{"key", "gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}};
  const std::map<std::string, json> flavors = {
      {"gpu-a",
       {{"spec", {{"nodeLabels", {{"gpu", "a"}}}, {"tolerations", json::array({toleration})}}}}},
      {"plain", {{"spec", json::object()}}}};
  auto spec = api::ParseSpec(QueuedJob()["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_TRUE(ApplyAssignment(wl, flavors, *spec).ok());
  const json& worker = spec->replica_specs[api::ReplicaType::kWorker].pod_template;
  EXPECT_EQ(worker["spec"]["nodeSelector"], (json{{"gpu", "a"}}));
  EXPECT_EQ(worker["spec"]["tolerations"], json::array({toleration}));  // once, not per resource
  EXPECT_EQ(worker["metadata"]["labels"][kPodSetLabel], "worker");
  const json& evaluator = spec->replica_specs[api::ReplicaType::kEvaluator].pod_template;
  EXPECT_FALSE(evaluator["spec"].contains("nodeSelector"));
  EXPECT_EQ(evaluator["metadata"]["labels"][kPodSetLabel], "evaluator");
}

TEST(KueueAdmission, AnAssignmentThatCannotBeAppliedSaysWhy) {
  json job = QueuedJob();
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {{"gpu", "b"}};
  auto parsed = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  api::TrainingJobSpec& spec = *parsed;
  const json wl = Admitted(json::array({{{"name", "worker"}, {"flavors", {{"cpu", "gpu-a"}}}}}));
  const std::map<std::string, json> flavors = {
      {"gpu-a", {{"spec", {{"nodeLabels", {{"gpu", "a"}}}}}}}};
  Status s = ApplyAssignment(wl, flavors, spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gpu-a"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("nodeSelector"), std::string::npos) << s.message();

  s = ApplyAssignment(wl, {}, spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ResourceFlavor gpu-a"), std::string::npos) << s.message();

  const json ps = Admitted(json::array({{{"name", "ps"}, {"flavors", json::object()}}}));
  s = ApplyAssignment(ps, {}, spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'ps'"), std::string::npos) << s.message();
}

TEST(KueueAdmission, SetConditionChangesOnlyWhatChanged) {
  json status = json::object();
  EXPECT_TRUE(SetCondition(status, "Admitted", false, "Pending", "waiting", "t1"));
  EXPECT_FALSE(SetCondition(status, "Admitted", false, "Pending", "waiting", "t2"));
  EXPECT_EQ(status["conditions"][0]["lastTransitionTime"], "t1");
  EXPECT_TRUE(SetCondition(status, "Admitted", true, "Admitted", "by cq", "t3"));
  ASSERT_EQ(status["conditions"].size(), 1U);
  EXPECT_EQ(status["conditions"][0]["status"], "True");
  EXPECT_EQ(status["conditions"][0]["lastTransitionTime"], "t3");
}

TEST(KueueAdmission, AnEvictionIsCountedUnderItsCause) {
  EXPECT_EQ(CauseOfEviction("Preempted"), api::RestartCause::kPreempted);
  EXPECT_EQ(CauseOfEviction("NodeFailures"), api::RestartCause::kNodeLost);
  EXPECT_EQ(CauseOfEviction("ClusterQueueStopped"), api::RestartCause::kEvicted);
  EXPECT_EQ(CauseOfEviction("Deactivated"), api::RestartCause::kEvicted);
  EXPECT_EQ(CauseOfEviction(""), api::RestartCause::kEvicted);
}

json EvictedWorkload(const std::string& reason) {
  return {{"metadata", {{"name", "wl"}}},
          {"status",
           {{"conditions", json::array({Condition("QuotaReserved", "True", "QuotaReserved"),
                                        Condition("Admitted", "True", "Admitted"),
                                        Condition("Evicted", "True", reason, "taken back")})},
            {"admission", {{"clusterQueue", "cq"}}}}}};
}

TEST(KueueAdmission, ClearingTheAdmissionFollowsKueuesJobFramework) {
  const json cleared = ClearAdmission(EvictedWorkload("Preempted"), "t1");
  EXPECT_FALSE(cleared["status"].contains("admission"));
  std::map<std::string, json> by_type;
  for (const json& c : cleared["status"]["conditions"]) by_type[c["type"]] = c;
  EXPECT_EQ(by_type["QuotaReserved"]["status"], "False");
  EXPECT_EQ(by_type["QuotaReserved"]["reason"], "Pending");
  EXPECT_EQ(by_type["QuotaReserved"]["message"], "taken back");
  EXPECT_EQ(by_type["Admitted"]["status"], "False");
  EXPECT_EQ(by_type["Admitted"]["reason"], "NoReservation");
  EXPECT_EQ(by_type["Requeued"]["status"], "True");
  EXPECT_EQ(by_type["Requeued"]["reason"], "Preempted");
  EXPECT_EQ(by_type["Evicted"]["status"], "True") << "Kueue resets it on the next admission";
  for (const auto& [type, c] : by_type) {
    EXPECT_FALSE(c.contains("lastUpdateTime")) << type << ": not a field of metav1.Condition";
  }
  EXPECT_FALSE(StateOf(cleared).quota_reserved);
  EXPECT_FALSE(StateOf(cleared).admitted);

  // Kueue requeues at once only after a preemption or node failures.
  const json stopped = ClearAdmission(EvictedWorkload("ClusterQueueStopped"), "t1");
  for (const json& c : stopped["status"]["conditions"]) {
    if (c["type"] == "Requeued") {
      EXPECT_EQ(c["status"], "False");
    }
  }
}

TEST(KueueAdmission, APriorityClassGivesTheWorkloadItsValue) {
  json wl = {{"spec", json::object()}};
  const json wpc = {{"metadata", {{"name", "high"}}}, {"value", 1000}};
  ASSERT_TRUE(SetPriority(wpc, wl).ok());
  EXPECT_EQ(wl["spec"]["priority"], 1000);
  EXPECT_EQ(
      wl["spec"]["priorityClassRef"],
      (json{{"group", "kueue.x-k8s.io"}, {"kind", "WorkloadPriorityClass"}, {"name", "high"}}));
  const Status bad = SetPriority({{"metadata", {{"name", "odd"}}}, {"value", "x"}}, wl);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("odd"), std::string::npos) << bad.message();
}

TEST(KueueAdmission, TheLastBackupIsPublishedOnTheWorkloadWhenItChanges) {
  json job = QueuedJob();
  json wl = {{"metadata", {{"name", "wl"}}}};
  EXPECT_FALSE(LastBackupPatch(job, wl).has_value()) << "no backup yet";
  job["status"]["progress"]["lastBackup"] = {
      {"epoch", 2}, {"step", 40}, {"time", "2026-01-01T00:00:05Z"}};
  auto patch = LastBackupPatch(job, wl);
  ASSERT_TRUE(patch.has_value());
  EXPECT_EQ((*patch)["metadata"]["annotations"],
            (json{{kLastBackupTimeAnnotation, "2026-01-01T00:00:05Z"},
                  {kLastBackupEpochAnnotation, "2"},
                  {kLastBackupStepAnnotation, "40"}}));
  wl["metadata"]["annotations"] = (*patch)["metadata"]["annotations"];
  wl["metadata"]["annotations"]["someone-else"] = "x";
  EXPECT_FALSE(LastBackupPatch(job, wl).has_value()) << "already says it";
  job["status"]["progress"]["lastBackup"]["step"] = 45;
  EXPECT_TRUE(LastBackupPatch(job, wl).has_value());
}

// Kueue's objects as a pass observes them ("<plural>/<name>", as the executor reads them from
// its caches), and what the pass's actions do to them: the Workload's create (a refused one
// kept for the next pass, as the executor keeps it), its patches and status writes.
class AdmissionPass : public ::testing::Test {
 protected:
  // One pass, its actions applied to the objects and its status to the job.
  struct Result {
    // The pass went past the admission to the rest of the rules: it made the job's Service
    // (the tests never show it one), or suspended the job.
    bool proceed = false;
    bool status_changed = false;
    std::optional<std::chrono::milliseconds> requeue_after;
    std::vector<Action> actions;
    Decision decision;
  };

  AdmissionPass() {
    in_.job = QueuedJob();
    in_.now = kube::WallTime(std::chrono::seconds(1700000000));
    in_.new_rendezvous_key = "k";
  }

  Result Pass() {
    Observe();
    Result r;
    r.decision = Reconcile(in_, options_);
    for (const Action& a : r.decision.actions) Act(a);
    r.status_changed = r.decision.status.has_value();
    if (r.decision.status) in_.job["status"] = *r.decision.status;
    const api::TrainingJobStatus st =
        api::TrainingJobStatus::FromJson(in_.job.value("status", json::object()));
    // A suspended job goes on to SuspendOrResume, which deletes its pods.
    const json& run_policy = in_.job["spec"].value("runPolicy", json::object());
    r.proceed = run_policy.value("suspend", false) && st.IsTrue(api::condition::kSuspended);
    for (const Action& a : r.decision.actions) {
      r.proceed = r.proceed || (a.kind == Action::Kind::kCreate && a.resource.plural == "services");
    }
    r.requeue_after = r.decision.requeue_after;
    r.actions = r.decision.actions;
    return r;
  }
  std::string Said(const std::string& field) {
    for (const json& c : in_.job["status"]["conditions"]) {
      if (c.value("type", "") == api::condition::kAdmitted) return c.value(field, "");
    }
    return "";
  }
  json& Workload() { return existing_["workloads/" + WorkloadName(in_.job)]; }
  // Kueue admits the Workload in ClusterQueue cq on flavor f (node label pool=train).
  void AdmitOnFlavorF() {
    Workload()["status"] = {
        {"conditions", json::array({Condition("QuotaReserved", "True"),
                                    Condition("Admitted", "True", "Admitted")})},
        {"admission",
         {{"clusterQueue", "cq"},
          {"podSetAssignments",
           json::array({{{"name", "worker"}, {"flavors", {{"cpu", "f"}}}},
                        {{"name", "evaluator"}, {"flavors", {{"cpu", "f"}}}}})}}}};
    existing_["resourceflavors/f"] = {{"spec", {{"nodeLabels", {{"pool", "train"}}}}}};
  }
  // The pod a pass creates, as sent.
  static std::optional<json> CreatedPod(const Result& r, const std::string& name) {
    for (const Action& a : r.actions) {
      if (a.kind == Action::Kind::kCreate && a.resource.plural == "pods" && a.name == name) {
        return ObjectOf(a);
      }
    }
    return std::nullopt;
  }

  std::map<std::string, json> existing_;
  // The API server's error answer to a create: its code and message.
  std::optional<std::pair<int, std::string>> create_error_;
  std::vector<json> created_, status_updates_;
  std::vector<std::pair<std::string, json>> patches_;  // "<plural>/<name>", the patch
  bool watched_ = false;
  ReconcilerOptions options_;
  Observed in_;

 private:
  std::optional<json> Existing(const std::string& key) const {
    auto it = existing_.find(key);
    if (it == existing_.end()) return std::nullopt;
    json o = it->second;
    o["metadata"]["name"] = key.substr(key.find('/') + 1);
    return o;
  }
  void Observe() {
    in_.refused = std::exchange(refused_, {});
    if (QueueName(in_.job).empty()) return;
    QueueObserved q;
    q.watched = watched_;
    q.workload = Existing("workloads/" + WorkloadName(in_.job));
    if (q.workload) {
      for (const std::string& f : AssignedFlavors(*q.workload)) {
        if (auto rf = Existing("resourceflavors/" + f)) q.flavors[f] = *rf;
      }
    } else if (const std::string pc = kube::LabelOf(in_.job, kPriorityClassLabel); !pc.empty()) {
      q.priority_class = Existing("workloadpriorityclasses/" + pc);
    }
    in_.queue = q;
  }
  void Act(const Action& a) {
    if (a.resource.plural != kWorkloads.plural) return;
    const std::string key = "workloads/" + a.name;
    switch (a.kind) {
      case Action::Kind::kCreate:
        if (create_error_) {
          const int code = create_error_->first;
          if (std::find(a.refusable.begin(), a.refusable.end(), code) != a.refusable.end()) {
            refused_[a.resource.plural] = Refusal{code, create_error_->second, in_.now};
          }
          return;
        }
        created_.push_back(a.object);
        existing_[key] = a.object;
        return;
      case Action::Kind::kUpdateStatus:
        status_updates_.push_back(a.object);
        existing_[key]["status"] = a.object["status"];
        return;
      case Action::Kind::kPatch:
        patches_.push_back({key, a.object});
        existing_[key].merge_patch(a.object);
        return;
      default:
        return;
    }
  }
  std::map<std::string, Refusal> refused_;
};

// Where the operator watches Kueue's objects a waiting job is looked at again only when its
// Workload changes (or after kWatchedWaitPoll), and a create the cache does not show yet is
// made again harmlessly (AlreadyExists is tolerated). That such a pass reads nothing live is
// ExecutorPass.AQueuedGangJobsPassReadsNothingLive.
TEST_F(AdmissionPass, WithKueueWatchedAWaitingJobIsLookedAtWhenItsWorkloadChanges) {
  watched_ = true;
  Result r = Pass();
  ASSERT_EQ(created_.size(), 1U);
  EXPECT_EQ(r.requeue_after, std::chrono::milliseconds(kWatchedWaitPoll));
  const Action* create = nullptr;
  for (const Action& a : r.actions) {
    if (a.kind == Action::Kind::kCreate && a.resource.plural == "workloads") create = &a;
  }
  ASSERT_NE(create, nullptr);
  EXPECT_NE(std::find(create->tolerated.begin(), create->tolerated.end(), 409),
            create->tolerated.end());
  AdmitOnFlavorF();
  r = Pass();
  EXPECT_TRUE(r.proceed);
  auto pod = CreatedPod(r, "mnist-worker-0");
  ASSERT_TRUE(pod.has_value());
  EXPECT_EQ((*pod)["spec"]["nodeSelector"]["pool"], "train");
}

TEST_F(AdmissionPass, AJobWithoutTheLabelIsNotTouched) {
  in_.job = TestJob();
  const Result r = Pass();
  EXPECT_TRUE(r.proceed);
  EXPECT_TRUE(created_.empty());
  for (const json& c : in_.job["status"]["conditions"]) EXPECT_NE(c["type"], "Admitted");
}

TEST_F(AdmissionPass, AQueuedJobGetsAWorkloadAndWaitsSayingSo) {
  const Result r = Pass();
  EXPECT_FALSE(r.proceed);
  EXPECT_TRUE(r.status_changed);
  EXPECT_EQ(r.requeue_after, std::chrono::milliseconds(kWaitPoll));
  ASSERT_EQ(created_.size(), 1U);
  EXPECT_EQ(created_[0]["metadata"]["name"], WorkloadName(in_.job));
  EXPECT_EQ(Said("status"), "False");
  EXPECT_EQ(Said("reason"), "Pending");
  EXPECT_EQ(in_.job["status"]["state"], api::kQueuedState);

  // Kueue says what it lacks: the job says it too, and keeps waiting.
  Workload()["status"] = {
      {"conditions", json::array({Condition("QuotaReserved", "False", "Pending",
                                            "insufficient unused quota for cpu")})}};
  const Result again = Pass();
  EXPECT_FALSE(again.proceed);
  EXPECT_TRUE(again.status_changed);
  EXPECT_EQ(Said("message"), "insufficient unused quota for cpu");
  EXPECT_FALSE(Pass().status_changed);  // nothing new: nothing to write
}

TEST_F(AdmissionPass, AnAdmittedJobProceedsWithItsAssignment) {
  Pass();
  AdmitOnFlavorF();
  const Result r = Pass();
  EXPECT_TRUE(r.proceed);
  EXPECT_TRUE(r.status_changed);
  EXPECT_EQ(Said("status"), "True");
  EXPECT_NE(Said("message").find("ClusterQueue cq"), std::string::npos) << Said("message");
  EXPECT_NE(in_.job["status"].value("state", ""), api::kQueuedState);
  auto pod = CreatedPod(r, "mnist-worker-1");
  ASSERT_TRUE(pod.has_value());
  EXPECT_EQ((*pod)["spec"]["nodeSelector"]["pool"], "train");
  EXPECT_EQ((*pod)["metadata"]["labels"][kPodSetLabel], "worker");
}

// The wait for Kueue's admission is counted in status.goodput, every wait added.
TEST_F(AdmissionPass, TheTimeQueuedIsCountedOnAdmission) {
  const kube::WallTime t0 = in_.now;
  Pass();
  in_.now = t0 + std::chrono::seconds(40);
  AdmitOnFlavorF();
  Pass();
  EXPECT_EQ(in_.job["status"]["goodput"]["queuedSeconds"], 40.0) << in_.job["status"].dump();
}

TEST_F(AdmissionPass, AnAssignmentNoPodCouldRunUnderWaitsSayingWhy) {
  in_.job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {
      {"pool", "mine"}};
  Pass();
  Workload()["status"] = {
      {"conditions", json::array({Condition("Admitted", "True", "Admitted")})},
      {"admission",
       {{"clusterQueue", "cq"},
        {"podSetAssignments", json::array({{{"name", "worker"}, {"flavors", {{"cpu", "f"}}}}})}}}};
  existing_["resourceflavors/f"] = {{"spec", {{"nodeLabels", {{"pool", "train"}}}}}};
  const Result r = Pass();
  EXPECT_FALSE(r.proceed);
  EXPECT_EQ(Said("reason"), "AssignmentNotApplicable");
  EXPECT_NE(Said("message").find("pool"), std::string::npos) << Said("message");
}

// The create's refusal comes back to the next pass (Observed::refused), which says it and
// waits before asking again.
TEST_F(AdmissionPass, WithoutKueueOrPermissionTheJobSaysWhatToDo) {
  create_error_ = {{404, "the server could not find it"}};
  Result r = Pass();
  EXPECT_FALSE(r.proceed);
  r = Pass();
  EXPECT_FALSE(r.proceed);
  EXPECT_EQ(Said("reason"), "KueueNotInstalled");
  EXPECT_NE(Said("message").find("install Kueue"), std::string::npos) << Said("message");
  EXPECT_EQ(r.requeue_after, std::chrono::milliseconds(kRefusedRetry));

  create_error_ = {{403, "workloads is forbidden"}};
  Pass();
  r = Pass();
  EXPECT_FALSE(r.proceed);
  EXPECT_EQ(Said("reason"), "WorkloadForbidden");
  EXPECT_NE(Said("message").find("kueue.enabled=true"), std::string::npos) << Said("message");
}

TEST_F(AdmissionPass, AFinishedJobMarksItsWorkloadFinished) {
  Pass();
  in_.job["status"] = {
      {"conditions", json::array({Condition("Succeeded", "True", "JobSucceeded", "done")})}};
  Pass();
  ASSERT_EQ(status_updates_.size(), 1U);
  const json& conds = status_updates_[0]["status"]["conditions"];
  ASSERT_EQ(conds.size(), 1U);
  EXPECT_EQ(conds[0]["type"], "Finished");
  EXPECT_EQ(conds[0]["reason"], "Succeeded");
  EXPECT_EQ(conds[0]["message"], "done");
  EXPECT_FALSE(conds[0].contains("lastUpdateTime")) << "not a field of metav1.Condition";

  Pass();
  EXPECT_EQ(status_updates_.size(), 1U) << "marked once";
}

// Another's Workload of the job's name: the job waits, saying whose it is and what to do
// (before, the pass failed and the reason was only in the operator's log).
TEST_F(AdmissionPass, AWorkloadOfAnotherOwnerIsSaidAndWaitedOn) {
  Workload() = {
      {"metadata",
       {{"name", WorkloadName(in_.job)},
        {"ownerReferences", json::array({{{"uid", "someone-else"}, {"controller", true}}})}}}};
  const Result r = Pass();
  EXPECT_FALSE(r.proceed);
  EXPECT_TRUE(created_.empty());
  EXPECT_EQ(Said("reason"), "WorkloadNotOwned");
  EXPECT_NE(Said("message").find("not owned by TrainingJob ns/mnist"), std::string::npos)
      << Said("message");
}

// The job's pods of gang `gen` as the API server shows them: running, owned by the job.
std::vector<json> RunningPods(const json& job, int gen) {
  auto spec = api::ParseSpec(job["spec"]);
  std::vector<json> pods;
  for (auto [type, n] :
       {std::pair{api::ReplicaType::kWorker, 2}, std::pair{api::ReplicaType::kEvaluator, 1}}) {
    for (int i = 0; i < n; ++i) {
      json pod = BuildPod(job, *spec, type, i, gen);
      pod["status"] = {{"phase", "Running"}};
      pods.push_back(std::move(pod));
    }
  }
  return pods;
}

// runPolicy.suspend follows the Workload's spec.active both ways, as Kueue's own integrations
// map a job's suspension: a suspended job's Workload is deactivated (Kueue frees its quota) and
// activated again when the job resumes; one deactivated by someone else stays so, and its job
// waits, Suspended.
TEST(ActivePatch, MapsSuspendToActiveAndLeavesAnotherDeactivationAlone) {
  json wl = {{"metadata", {{"name", "w"}}}, {"spec", {{"active", true}}}};
  EXPECT_FALSE(ActivePatch(wl, /*suspended=*/false).has_value());
  auto off = ActivePatch(wl, true);
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ((*off)["spec"]["active"], false);
  EXPECT_EQ((*off)["metadata"]["annotations"][kDeactivatedForSuspendAnnotation], "true");
  wl.merge_patch(*off);
  EXPECT_FALSE(ActivePatch(wl, true).has_value()) << "already deactivated";
  EXPECT_FALSE(DeactivatedByOthers(wl));
  auto on = ActivePatch(wl, false);
  ASSERT_TRUE(on.has_value());
  wl.merge_patch(*on);
  EXPECT_EQ(wl["spec"]["active"], true);
  EXPECT_FALSE(wl["metadata"]["annotations"].contains(kDeactivatedForSuspendAnnotation));
  // An admin's deactivation: not undone, and the job says it is suspended by it.
  wl["spec"]["active"] = false;
  EXPECT_FALSE(ActivePatch(wl, false).has_value());
  EXPECT_TRUE(DeactivatedByOthers(wl));
}

TEST_F(AdmissionPass, ASuspendedJobDeactivatesItsWorkloadAndReleasesItsAdmissionOnceStopped) {
  Pass();
  AdmitOnFlavorF();
  Workload()["metadata"] = {{"name", WorkloadName(in_.job)},
                            {"ownerReferences", json::array({OwnerReference(in_.job)})}};
  in_.job["spec"]["runPolicy"]["suspend"] = true;
  in_.pods = RunningPods(in_.job, 0);
  Result r = Pass();
  EXPECT_TRUE(r.proceed) << "the reconciler suspends the job (its pods deleted)";
  ASSERT_EQ(patches_.size(), 1U);
  EXPECT_EQ(patches_[0].second["spec"]["active"], false);
  // Kueue evicts the deactivated Workload; once the pods are gone its admission is released.
  Workload()["spec"]["active"] = false;
  Workload()["metadata"]["annotations"][kDeactivatedForSuspendAnnotation] = "true";
  Workload()["status"]["conditions"].push_back(
      Condition("Evicted", "True", "Deactivated", "The workload is deactivated"));
  in_.pods.clear();
  const size_t updates = status_updates_.size();
  r = Pass();
  EXPECT_TRUE(r.proceed);
  ASSERT_EQ(status_updates_.size(), updates + 1);
  EXPECT_EQ(patches_.size(), 1U) << "deactivated once";
  // Resumed: the Workload is active again and the job waits for its admission.
  in_.job["spec"]["runPolicy"]["suspend"] = false;
  r = Pass();
  ASSERT_EQ(patches_.size(), 2U);
  EXPECT_EQ(patches_[1].second["spec"]["active"], true);
  EXPECT_FALSE(r.proceed);
}

TEST_F(AdmissionPass, AWorkloadDeactivatedBySomeoneElseSuspendsTheJobUntilItIsActive) {
  Pass();
  Workload()["spec"]["active"] = false;
  const Result r = Pass();
  EXPECT_FALSE(r.proceed);
  EXPECT_TRUE(patches_.empty()) << "another's deactivation is not undone";
  bool suspended = false;
  for (const json& c : in_.job["status"]["conditions"]) {
    suspended = suspended || (c["type"] == "Suspended" && c["status"] == "True" &&
                              c["reason"] == "WorkloadDeactivated");
  }
  EXPECT_TRUE(suspended) << in_.job["status"].dump(2);
}

TEST(PriorityBoost, OnePerPeriodOfUnsavedWorkAtMostTheMax) {
  using std::chrono::seconds;
  EXPECT_EQ(PriorityBoost(seconds(3600), seconds(60), 0), 0) << "off";
  EXPECT_EQ(PriorityBoost(seconds(59), seconds(60), 9), 0);
  EXPECT_EQ(PriorityBoost(seconds(150), seconds(60), 9), 2);
  EXPECT_EQ(PriorityBoost(seconds(3600), seconds(60), 9), 9);
  const json wl = {{"metadata", {{"name", "w"}}}};
  auto set = PriorityBoostPatch(wl, 2);
  ASSERT_TRUE(set.has_value());
  EXPECT_EQ((*set)["metadata"]["annotations"][kPriorityBoostAnnotation], "2");
  json boosted = wl;
  boosted.merge_patch(*set);
  EXPECT_FALSE(PriorityBoostPatch(boosted, 2).has_value()) << "already says so";
  auto cleared = PriorityBoostPatch(boosted, 0);
  ASSERT_TRUE(cleared.has_value());
  EXPECT_TRUE((*cleared)["metadata"]["annotations"][kPriorityBoostAnnotation].is_null());
  EXPECT_FALSE(PriorityBoostPatch(wl, 0).has_value());
}

// A running job's Workload carries what preempting it would lose: the minutes of work since
// its last backup (or since its gang's first step), so that Kueue, choosing among jobs of one
// priority, preempts the one that loses least.
TEST_F(AdmissionPass, ARunningJobsWorkloadIsBoostedByItsWorkSinceTheLastBackup) {
  options_.kueue_priority_boost_max = 5;
  Pass();
  AdmitOnFlavorF();
  const kube::WallTime t0 = in_.now;
  in_.pods = RunningPods(in_.job, 0);
  in_.job["status"]["goodput"]["trainingSince"] = kube::FormatTime(t0 - std::chrono::seconds(600));
  in_.job["status"]["progress"]["lastBackup"] = {
      {"epoch", 1}, {"step", 10}, {"time", kube::FormatTime(t0 - std::chrono::seconds(150))}};
  patches_.clear();
  Result r = Pass();
  std::vector<std::string> boosts;
  for (const auto& [key, patch] : patches_) {
    const json& a = patch["metadata"]["annotations"];
    if (a.contains(kPriorityBoostAnnotation)) boosts.push_back(a[kPriorityBoostAnnotation].dump());
  }
  EXPECT_EQ(boosts, std::vector<std::string>{"\"2\""}) << "150 s since the backup";
  ASSERT_TRUE(r.requeue_after.has_value());
  EXPECT_LE(*r.requeue_after, std::chrono::milliseconds(std::chrono::seconds(60)));
  // A new backup: the boost falls back.
  in_.job["status"]["progress"]["lastBackup"]["time"] = kube::FormatTime(t0);
  patches_.clear();
  Pass();
  ASSERT_EQ(patches_.size(), 2U) << "the new backup published, the boost removed";
  EXPECT_TRUE(patches_[1].second["metadata"]["annotations"].contains(kPriorityBoostAnnotation));
  EXPECT_TRUE(patches_[1].second["metadata"]["annotations"][kPriorityBoostAnnotation].is_null());
}

// Kueue's waitForPodsReady reads PodsReady on the Workload: the operator sets it as Kueue's job
// framework does for its own kinds, so an admitted job is not evicted after the timeout while
// it runs, and a gang that restarts is given recoveryTimeout.
TEST(PodsReady, FollowsTheCurrentGangAsKueuesJobFrameworkDoes) {
  const json job = QueuedJob();
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok());
  json wl = BuildWorkload(job, *spec);
  std::vector<json> pods = RunningPods(job, 0);
  // Not all running: nothing written (no condition is WaitForStart to Kueue).
  pods[1]["status"]["phase"] = "Pending";
  EXPECT_FALSE(WithPodsReady(wl, job, *spec, 0, pods, "t0").has_value());
  // All running: True, Started.
  pods[1]["status"]["phase"] = "Running";
  auto ready = WithPodsReady(wl, job, *spec, 0, pods, "t1");
  ASSERT_TRUE(ready.has_value());
  const json* c = nullptr;
  auto cond = [&](const json& w) {
    for (const json& x : w["status"]["conditions"]) {
      if (x["type"] == "PodsReady") c = &x;
    }
    return c != nullptr ? c->value("status", "") + "/" + c->value("reason", "") : "none";
  };
  EXPECT_EQ(cond(*ready), "True/Started");
  EXPECT_FALSE(c->contains("lastUpdateTime")) << "not a field of metav1.Condition";
  wl = *ready;
  EXPECT_FALSE(WithPodsReady(wl, job, *spec, 0, pods, "t2").has_value()) << "already says so";
  // A worker fails and the gang restarts: False, WaitForRecovery; the new gang's pods (gang 1)
  // running: True, Recovered. The old gang's pods do not count.
  pods[0]["status"]["phase"] = "Failed";
  wl = *WithPodsReady(wl, job, *spec, 0, pods, "t3");
  EXPECT_EQ(cond(wl), "False/WaitForRecovery");
  json restarted = job;
  restarted["status"]["restartCount"] = 1;
  EXPECT_FALSE(WithPodsReady(wl, restarted, *spec, 1, RunningPods(job, 0), "t4").has_value());
  wl = *WithPodsReady(wl, restarted, *spec, 1, RunningPods(job, 1), "t5");
  EXPECT_EQ(cond(wl), "True/Recovered");
  // Succeeded pods count as ready (a finished gang is not timed out).
  std::vector<json> done = RunningPods(job, 1);
  for (json& p : done) p["status"]["phase"] = "Succeeded";
  EXPECT_FALSE(WithPodsReady(wl, restarted, *spec, 1, done, "t6").has_value());
}

TEST_F(AdmissionPass, AnEvictedGangStopsLosslesslyWaitsUncountedAndResumesOnReadmission) {
  in_.job["spec"]["runPolicy"] = {{"backoffLimit", 0}};  // any counted restart would fail it
  Pass();
  Workload() = EvictedWorkload("Preempted");
  Workload()["metadata"] = {{"name", WorkloadName(in_.job)},
                            {"ownerReferences", json::array({OwnerReference(in_.job)})}};
  in_.pods = RunningPods(in_.job, 0);

  // Evicted while the gang runs: every pod deleted (SIGTERM), one restart counted by cause.
  Result r = Pass();
  EXPECT_FALSE(r.proceed);
  EXPECT_TRUE(r.status_changed);
  std::vector<std::string> deleted, events;
  for (const Action& a : r.actions) {
    if (a.kind == Action::Kind::kDelete) deleted.push_back(a.name);
    if (a.kind == Action::Kind::kEvent) events.push_back(a.reason + ": " + a.message);
  }
  EXPECT_EQ(deleted,
            (std::vector<std::string>{"mnist-worker-0", "mnist-worker-1", "mnist-evaluator-0"}));
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].rfind("Preempted: Kueue evicted", 0), 0U) << events[0];
  EXPECT_NE(events[0].find("not counted against backoffLimit"), std::string::npos) << events[0];
  const json& st = in_.job["status"];
  EXPECT_EQ(st["restartCount"], 1);
  EXPECT_EQ(st["restarts"]["byCause"], (json{{"Preempted", 1}}));
  EXPECT_EQ(st["restarts"]["backoffLimitUsed"], 0);
  EXPECT_EQ(st["state"], api::kQueuedState);
  EXPECT_EQ(Said("status"), "False");
  EXPECT_EQ(Said("reason"), "Preempted");
  EXPECT_TRUE(status_updates_.empty()) << "the quota is held until the pods are gone";

  // Terminating: nothing deleted twice, nothing counted twice.
  for (json& p : in_.pods) p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  r = Pass();
  EXPECT_FALSE(r.proceed);
  EXPECT_FALSE(r.status_changed);
  EXPECT_TRUE(r.actions.empty());
  EXPECT_EQ(in_.job["status"]["restartCount"], 1);

  // Gone: the admission is cleared, once; the job waits in the queue again.
  in_.pods.clear();
  r = Pass();
  EXPECT_FALSE(r.proceed);
  ASSERT_EQ(status_updates_.size(), 1U);
  EXPECT_FALSE(Workload()["status"].contains("admission"));
  r = Pass();
  EXPECT_FALSE(r.proceed);
  EXPECT_EQ(status_updates_.size(), 1U);
  EXPECT_EQ(in_.job["status"]["state"], api::kQueuedState);

  // Readmitted: the reconciler makes gang 1 at once (no restart backoff), which resumes from
  // the backup its trainers wrote when they stopped.
  Workload()["status"] = {
      {"conditions",
       json::array({Condition("QuotaReserved", "True"), Condition("Admitted", "True", "Admitted"),
                    Condition("Evicted", "False", "QuotaReserved")})},
      {"admission", {{"clusterQueue", "cq"}}}};
  r = Pass();
  EXPECT_TRUE(r.proceed);
  const Decision& d = r.decision;
  int created = 0;
  for (const Action& a : d.actions) {
    if (a.kind != Action::Kind::kCreate || a.resource.plural != "pods") continue;
    ++created;
    EXPECT_EQ(ObjectOf(a)["metadata"]["labels"][api::kLabelRestartCount], "1") << a.name;
  }
  EXPECT_EQ(created, 3);
  ASSERT_TRUE(d.status.has_value());
  EXPECT_FALSE((*d.status).contains("conditions") &&
               api::TrainingJobStatus::FromJson(*d.status).IsTrue(api::condition::kFailed))
      << d.status->dump(2);
  EXPECT_EQ((*d.status)["restarts"]["backoffLimitUsed"], 0);
}

// A drained queue: the status lagged the last poll (epoch 2 step 82) while the chief backed
// up epoch 3 step 236 as it stopped. The step the next gang resumes from is the one its
// termination message names; the status and the Workload say so once it has ended.
TEST_F(AdmissionPass, AStoppedChiefsLastBackupIsWhatTheStatusAndTheWorkloadSay) {
  Pass();
  Workload() = EvictedWorkload("ClusterQueueStopped");
  Workload()["metadata"] = {{"name", WorkloadName(in_.job)},
                            {"ownerReferences", json::array({OwnerReference(in_.job)})}};
  in_.job["status"]["progress"] = {
      {"epoch", 2}, {"lastBackup", {{"epoch", 2}, {"step", 82}, {"time", "2026-01-01T00:00:01Z"}}}};
  in_.pods = RunningPods(in_.job, 0);
  Pass();  // the gang is stopped
  for (json& p : in_.pods) p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:09Z";
  json& chief = in_.pods[0];
  ASSERT_EQ(chief["metadata"]["name"], "mnist-worker-0");
  chief["status"]["phase"] = "Failed";
  chief["status"]["containerStatuses"] = json::array(
      {{{"name", "trainer"},
        {"state",
         {{"terminated",
           {{"exitCode", 75},
            {"finishedAt", "2026-01-01T00:00:10Z"},
            {"message",
             R"({"lastBackup":{"epoch":3,"step":236,"time":"2026-01-01T00:00:09.5Z"}})"}}}}}}});
  patches_.clear();
  Result r = Pass();
  EXPECT_TRUE(r.status_changed);
  EXPECT_EQ(in_.job["status"]["progress"]["lastBackup"],
            (json{{"epoch", 3}, {"step", 236}, {"time", "2026-01-01T00:00:09Z"}}));
  ASSERT_EQ(patches_.size(), 1U);
  EXPECT_EQ(patches_[0].first, "workloads/" + WorkloadName(in_.job));
  EXPECT_EQ(patches_[0].second["metadata"]["annotations"][kLastBackupStepAnnotation], "236");
  // Once taken, the same report changes nothing; an older one never goes back.
  r = Pass();
  EXPECT_FALSE(r.status_changed);
  chief["status"]["containerStatuses"][0]["state"]["terminated"]["message"] =
      R"({"lastBackup":{"epoch":3,"step":200}})";
  r = Pass();
  EXPECT_FALSE(r.status_changed);
  EXPECT_EQ(in_.job["status"]["progress"]["lastBackup"]["step"], 236);
}

TEST_F(AdmissionPass, AJobWithAPriorityClassLabelGetsItsPriorityOrSaysWhatIsMissing) {
  in_.job["metadata"]["labels"][kPriorityClassLabel] = "high";
  Result r = Pass();
  EXPECT_FALSE(r.proceed);
  EXPECT_TRUE(created_.empty());
  EXPECT_EQ(Said("reason"), "PriorityClassNotFound");
  EXPECT_NE(Said("message").find("WorkloadPriorityClass high"), std::string::npos);

  existing_["workloadpriorityclasses/high"] = {{"metadata", {{"name", "high"}}}, {"value", 1000}};
  r = Pass();
  ASSERT_EQ(created_.size(), 1U);
  EXPECT_EQ(created_[0]["spec"]["priority"], 1000);
  EXPECT_EQ(created_[0]["spec"]["priorityClassRef"]["name"], "high");
}

}  // namespace
}  // namespace tj::controller::kueue
