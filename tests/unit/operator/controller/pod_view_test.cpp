// The view of a pod the operator reads (pod_view.h): one row per way a kubelet, a scheduler
// or a user leaves a pod, each as the API server returns it whole (managedFields, TF_CONFIG,
// volumes, ...). The view of the pod the informer cache keeps (TrimPodForCache) must equal the
// view of the whole pod, so that trimming never hides from the reconciler what it reads.
#include "operator/controller/pod_view.h"

#include <gtest/gtest.h>

#include "operator/controller/cache_transforms.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/test_job.h"

namespace tj::controller {
namespace {

using api::ReplicaType;
using nlohmann::json;

constexpr char kCreated[] = "2026-03-01T10:00:00Z";
constexpr char kFinished[] = "2026-03-01T10:05:00Z";

// Worker `index` of TestJob() as the operator creates it, with everything the API server adds.
json WholePod(int index, const json& status) {
  const json job = TestJob();
  auto spec = api::ParseSpec(job["spec"]);
  EXPECT_TRUE(spec.ok());
  json pod = BuildPod(job, *spec, ReplicaType::kWorker, index, 2, "sha256:abcd");
  json& md = pod["metadata"];
  md["uid"] = "pod-uid-" + std::to_string(index);
  md["resourceVersion"] = "4711";
  md["creationTimestamp"] = kCreated;
  md["managedFields"] = json::array({{{"manager", "tj-operator"}, {"operation", "Update"}}});
  md["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{}";
  pod["spec"]["nodeName"] = "node-1";
  // What the DefaultTolerationSeconds admission plugin adds to every pod.
  for (const char* key : {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}) {
    pod["spec"]["tolerations"].push_back({{"key", key},
                                          {"operator", "Exists"},
                                          {"effect", "NoExecute"},
                                          {"tolerationSeconds", 300}});
  }
  pod["spec"]["serviceAccountName"] = "default";
  pod["spec"]["volumes"].push_back({{"name", "kube-api-access"}, {"projected", json::object()}});
  pod["status"] = status;
  pod["status"]["hostIP"] = "10.0.0.1";
  pod["status"]["startTime"] = kCreated;
  pod["status"]["qosClass"] = "BestEffort";
  return pod;
}

json TrainerStatus(const json& state) {
  return {{"name", "trainer"}, {"image", "tj-trainer"}, {"imageID", "sha256:1234"},
          {"restartCount", 0}, {"ready", false},        {"state", state}};
}

struct ViewCase {
  const char* name;
  json pod;
};

std::vector<ViewCase> Cases() {
  const json scheduled = {{"type", "PodScheduled"}, {"status", "True"}};
  json sidecar = WholePod(
      0,
      {{"phase", "Failed"},
       {"podIP", "10.1.0.9"},
       {"containerStatuses",
        json::array({{{"name", "istio-proxy"}, {"state", {{"terminated", {{"exitCode", 0}}}}}},
                     {{"name", "tensorflow"},
                      {"state",
                       {{"terminated",
                         {{"exitCode", 3}, {"reason", "Error"}, {"finishedAt", kFinished}}}}}}})}});
  // A user's own program: a container named tensorflow beside a sidecar, its status port an
  // argument.
  sidecar["spec"]["containers"][0]["name"] = "tensorflow";
  sidecar["spec"]["containers"][0]["args"] = {"python", "train.py", "--status-port=9100"};
  sidecar["spec"]["containers"].push_back({{"name", "istio-proxy"}, {"image", "proxy"}});
  return {
      {"Running",
       WholePod(0,
                {{"phase", "Running"},
                 {"podIP", "10.1.0.7"},
                 {"conditions", json::array({scheduled, {{"type", "Ready"}, {"status", "True"}}})},
                 {"containerStatuses",
                  json::array({TrainerStatus({{"running", {{"startedAt", kCreated}}}})})}})},
      {"Unschedulable",
       WholePod(1, {{"phase", "Pending"},
                    {"conditions", json::array({{{"type", "PodScheduled"},
                                                 {"status", "False"},
                                                 {"reason", "Unschedulable"},
                                                 {"message", "0/1 nodes are available"}}})}})},
      {"ImagePull",
       WholePod(0, {{"phase", "Pending"},
                    {"conditions", json::array({scheduled})},
                    {"containerStatuses",
                     json::array({TrainerStatus({{"waiting",
                                                  {{"reason", "ImagePullBackOff"},
                                                   {"message", "Back-off pulling image"}}}})})}})},
      {"RootImage",
       WholePod(0,
                {{"phase", "Pending"},
                 {"containerStatuses",
                  json::array({TrainerStatus({{"waiting",
                                               {{"reason", "CreateContainerConfigError"},
                                                {"message",
                                                 "container has runAsNonRoot and image will run as "
                                                 "root"}}}})})}})},
      {"SecretMissing",
       WholePod(1, {{"phase", "Pending"},
                    {"containerStatuses",
                     json::array({TrainerStatus(
                         {{"waiting",
                           {{"reason", "CreateContainerConfigError"},
                            {"message", "secret \"mnist-rendezvous\" not found"}}}})})}})},
      {"Succeeded",
       WholePod(
           0,
           {{"phase", "Succeeded"},
            {"containerStatuses",
             json::array({TrainerStatus(
                 {{"terminated",
                   {{"exitCode", 0}, {"reason", "Completed"}, {"finishedAt", kFinished}}}})})}})},
      {"Evicted",
       WholePod(1, {{"phase", "Failed"},
                    {"reason", "Evicted"},
                    {"message", "The node was low on resource: memory."},
                    {"conditions", json::array({{{"type", "DisruptionTarget"},
                                                 {"status", "True"},
                                                 {"reason", "TerminationByKubelet"}}})}})},
      {"Deleting",
       [] {
         json p = WholePod(1, {{"phase", "Running"}, {"podIP", "10.1.0.8"}});
         p["metadata"]["deletionTimestamp"] = kFinished;
         p["metadata"]["deletionGracePeriodSeconds"] = 30;
         return p;
       }()},
      {"SidecarFirst", sidecar},
  };
}

class PodViewTest : public ::testing::TestWithParam<ViewCase> {};

TEST_P(PodViewTest, TheCachedPodReadsAsTheWholeOne) {
  json trimmed = GetParam().pod;
  TrimPodForCache(trimmed);
  ASSERT_LT(trimmed.dump().size(), GetParam().pod.dump().size());  // something was dropped
  const PodView whole = ViewOfPod(GetParam().pod);
  const PodView cached = ViewOfPod(trimmed);
  EXPECT_EQ(cached, whole);
  // Field by field, so a failure names the one that differs.
  EXPECT_EQ(cached.name, whole.name);
  EXPECT_EQ(cached.key_hash, whole.key_hash);
  EXPECT_EQ(cached.status_port, whole.status_port);
  EXPECT_EQ(cached.created, whole.created);
  EXPECT_EQ(cached.unschedulable, whole.unschedulable);
  EXPECT_EQ(cached.disruption, whole.disruption);
  EXPECT_EQ(cached.waiting, whole.waiting);
  EXPECT_EQ(cached.trainer_terminated, whole.trainer_terminated);
  EXPECT_EQ(cached.being_deleted, whole.being_deleted);
  EXPECT_EQ(cached.uid, whole.uid);
  EXPECT_EQ(cached.grace_ends, whole.grace_ends);
  EXPECT_EQ(cached.node_name, whole.node_name);
  EXPECT_EQ(cached.tolerations, whole.tolerations);
}

INSTANTIATE_TEST_SUITE_P(Table, PodViewTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

const json& CaseNamed(const std::string& name) {
  static const std::vector<ViewCase> cases = Cases();
  for (const auto& c : cases) {
    if (c.name == name) return c.pod;
  }
  ADD_FAILURE() << "no case " << name;
  static const json kNone;
  return kNone;
}

TEST(PodView, ReadsTheOperatorsLabelsAndAnnotations) {
  const PodView v = ViewOfPod(CaseNamed("Running"));
  EXPECT_EQ(v.name, "mnist-worker-0");
  EXPECT_EQ(v.replica_type, ReplicaType::kWorker);
  EXPECT_EQ(v.replica_index, 0);
  EXPECT_EQ(v.gang, 2);
  EXPECT_EQ(v.key_hash, "sha256:abcd");
  EXPECT_EQ(v.status_port, kDefaultStatusPort);  // the first replica of a job without a chief
  EXPECT_EQ(v.created, kube::ParseTime(kCreated));
  EXPECT_EQ(v.phase, "Running");
  EXPECT_EQ(v.pod_ip, "10.1.0.7");
  EXPECT_TRUE(v.Active());
  EXPECT_EQ(v.PendingReason(), "");
}

// What the lost-node rules read of a pod: its uid (a force deletion's precondition), the node
// it is bound to, its tolerations, and when its grace period ends.
TEST(PodView, ReadsItsNodeTolerationsAndGracePeriod) {
  const PodView running = ViewOfPod(CaseNamed("Running"));
  EXPECT_EQ(running.uid, "pod-uid-0");
  EXPECT_EQ(running.node_name, "node-1");
  ASSERT_EQ(running.tolerations.size(), 2u);
  EXPECT_EQ(running.tolerations[1],
            (Toleration{"node.kubernetes.io/unreachable", "Exists", "", "NoExecute", 300}));
  EXPECT_FALSE(running.grace_ends);
  const PodView deleting = ViewOfPod(CaseNamed("Deleting"));
  EXPECT_EQ(deleting.grace_ends, kube::ParseTime(kFinished));
  EXPECT_EQ(deleting.deleted_at, *kube::ParseTime(kFinished) - std::chrono::seconds(30));
}

TEST(PodView, SaysWhyAPodIsPending) {
  EXPECT_EQ(ViewOfPod(CaseNamed("Unschedulable")).PendingReason(),
            "Unschedulable: 0/1 nodes are available");
  EXPECT_EQ(ViewOfPod(CaseNamed("ImagePull")).PendingReason(), "ImagePullBackOff");
  const PodView secret = ViewOfPod(CaseNamed("SecretMissing"));
  ASSERT_EQ(secret.waiting.size(), 1u);
  EXPECT_EQ(secret.waiting[0].message, "secret \"mnist-rendezvous\" not found");
}

TEST(PodView, HowAPodEnded) {
  const PodView done = ViewOfPod(CaseNamed("Succeeded"));
  ASSERT_TRUE(done.trainer_terminated.has_value());
  EXPECT_EQ(done.trainer_terminated->exit_code, 0);
  EXPECT_EQ(done.trainer_terminated->finished_at, kube::ParseTime(kFinished));
  EXPECT_FALSE(done.Active());

  const PodView evicted = ViewOfPod(CaseNamed("Evicted"));
  EXPECT_EQ(evicted.reason, "Evicted");
  EXPECT_EQ(evicted.disruption, "TerminationByKubelet");
  EXPECT_FALSE(evicted.trainer_terminated.has_value());

  const PodView deleting = ViewOfPod(CaseNamed("Deleting"));
  EXPECT_TRUE(deleting.being_deleted);
  EXPECT_FALSE(deleting.Active());
}

// A trainer's termination message names the backup it ended with; anything else there (a
// program's own words, a message of another shape, the tenant's bytes) reads as none.
TEST(PodView, TheBackupATrainerEndedWithFromItsTerminationMessage) {
  auto ended_saying = [](const json& message) {
    json terminated = {{"exitCode", 75}, {"finishedAt", kFinished}};
    if (!message.is_null()) terminated["message"] = message;
    return ViewOfPod(WholePod(0, {{"phase", "Failed"},
                                  {"containerStatuses",
                                   json::array({TrainerStatus({{"terminated", terminated}})})}}))
        .trainer_terminated->last_backup;
  };
  EXPECT_EQ(ended_saying(R"({"lastBackup":{"epoch":3,"step":236,"time":"2026-03-01T10:04:59.5Z"}})"
                         "\n"),
            (json{{"epoch", 3}, {"step", 236}, {"time", "2026-03-01T10:04:59Z"}}));
  EXPECT_EQ(ended_saying(R"({"lastBackup":{"epoch":3,"step":236}})"),
            (json{{"epoch", 3}, {"step", 236}}));
  EXPECT_TRUE(ended_saying(nullptr).is_null());
  EXPECT_TRUE(ended_saying("Collective ops is aborted by: recvmsg: Connection reset").is_null());
  EXPECT_TRUE(ended_saying(R"({"lastBackup":{"epoch":-1,"step":2}})").is_null());
  EXPECT_TRUE(ended_saying(R"({"lastBackup":{"epoch":"3","step":2}})").is_null());
  EXPECT_TRUE(ended_saying(R"({"lastBackup":[3,2]})").is_null());
  EXPECT_TRUE(ended_saying(std::string(5000, '{')).is_null());
  EXPECT_EQ(ended_saying(R"({"lastBackup":{"epoch":1,"step":2,"time":"yesterday"}})"),
            (json{{"epoch", 1}, {"step", 2}}));
}

// The kubelet lists container statuses by name: a sidecar's can come before the program's.
// The exit code that decides a restart is the TF_CONFIG container's, found as in the spec.
TEST(PodView, TheProgramsContainerNotTheSidecars) {
  const PodView v = ViewOfPod(CaseNamed("SidecarFirst"));
  ASSERT_TRUE(v.trainer_terminated.has_value());
  EXPECT_EQ(v.trainer_terminated->exit_code, 3);
  EXPECT_EQ(v.status_port, 9100);
  const PodOutcome o = OutcomeOf(v);
  EXPECT_TRUE(o.failed);
  EXPECT_EQ(o.exit_code, 3);
}

// The equality above can fail: a field the view reads, dropped, changes the view.
TEST(PodView, ADroppedFieldChangesTheView) {
  json pod = CaseNamed("Unschedulable");
  const PodView before = ViewOfPod(pod);
  pod["status"].erase("conditions");
  EXPECT_NE(ViewOfPod(pod), before);
  pod = CaseNamed("Running");
  pod["spec"]["containers"][0].erase("env");
  EXPECT_NE(ViewOfPod(pod), ViewOfPod(CaseNamed("Running")));
}

// Whatever a kubelet or a tenant wrote, of whatever type, reads as absent and never throws.
TEST(PodView, MistypedFieldsReadAsAbsent) {
  const json pod = {
      {"metadata",
       {{"name", 7},
        {"labels", {{"tjo.dev/replica-index", "99999999999"}}},
        {"creationTimestamp", true}}},
      {"spec", {{"containers", json::array({{{"name", 7}}, {{"name", "b"}}})}}},
      {"status",
       {{"phase", 3},
        {"podIP", json::array()},
        {"conditions", {{"type", "PodScheduled"}}},
        {"containerStatuses",
         json::array({1,
                      {{"name", 5}},
                      {{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", "x"}}}}}}})}}}};
  PodView v;
  ASSERT_NO_THROW(v = ViewOfPod(pod));
  EXPECT_EQ(v.name, "");
  EXPECT_EQ(v.replica_index, -1);
  EXPECT_FALSE(v.created.has_value());
  EXPECT_EQ(v.phase, "Pending");
  EXPECT_EQ(v.pod_ip, "");
  ASSERT_TRUE(v.trainer_terminated.has_value());
  EXPECT_FALSE(v.trainer_terminated->exit_code.has_value());
  EXPECT_NO_THROW(ViewOfPod({{"spec", {{"containers", "no"}}}}));
  // An env entry without a string name is skipped, by the view and by the cache's trim alike.
  json env_pod = {{"spec",
                   {{"containers", json::array({{{"name", "trainer"},
                                                 {"env", json::array({{{"name", 3}},
                                                                      {{"name", "TJ_STATUS_PORT"},
                                                                       {"value", "8470"}}})}}})}}}};
  ASSERT_NO_THROW(v = ViewOfPod(env_pod));
  EXPECT_EQ(v.status_port, 8470);
  ASSERT_NO_THROW(TrimPodForCache(env_pod));
  EXPECT_EQ(ViewOfPod(env_pod).status_port, 8470);
  EXPECT_NO_THROW(ViewOfPod(nullptr));
  EXPECT_NO_THROW(ViewOfPod(json::array()));
}

}  // namespace
}  // namespace tj::controller
