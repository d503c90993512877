// How the reconciler names the cause of a pod's end, from what the API server holds: one row
// per signal a kubelet, scheduler, controller or user leaves on a pod.
#include "operator/controller/restart_cause.h"

#include <gtest/gtest.h>

namespace tj::controller {
namespace {

using api::RestartCause;
using nlohmann::json;

struct CauseCase {
  const char* name;
  json pod;
  RestartCause want;
};

json Terminated(int code) {
  return json::array({{{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", code}}}}}}});
}
json Disruption(const char* reason, const char* status = "True") {
  return json::array({{{"type", "Ready"}, {"status", "False"}},
                      {{"type", "DisruptionTarget"}, {"status", status}, {"reason", reason}}});
}
const json kDeleting = {{"deletionTimestamp", "2026-01-01T00:00:00Z"}};

class ClassifyTest : public ::testing::TestWithParam<CauseCase> {};

TEST_P(ClassifyTest, NamesTheCause) {
  EXPECT_EQ(api::ToString(ClassifyRestartCause(ViewOfPod(GetParam().pod))),
            api::ToString(GetParam().want));
}

INSTANTIATE_TEST_SUITE_P(
    Table, ClassifyTest,
    ::testing::Values(
        CauseCase{"ExitOne",
                  {{"status", {{"phase", "Failed"}, {"containerStatuses", Terminated(1)}}}},
                  RestartCause::kFailed},
        CauseCase{"OomKilled",
                  {{"status", {{"phase", "Failed"}, {"containerStatuses", Terminated(137)}}}},
                  RestartCause::kFailed},
        CauseCase{"PeerLostAlone",
                  {{"status", {{"phase", "Failed"}, {"containerStatuses", Terminated(75)}}}},
                  RestartCause::kFailed},
        CauseCase{"NoStatus", json::object(), RestartCause::kFailed},
        CauseCase{"KubeletEviction",
                  {{"status", {{"phase", "Failed"}, {"reason", "Evicted"}}}},
                  RestartCause::kEvicted},
        CauseCase{"SchedulerPreemptionOld",
                  {{"status", {{"reason", "Preempting"}}}},
                  RestartCause::kPreempted},
        CauseCase{"GracefulNodeShutdown",
                  {{"status", {{"phase", "Failed"}, {"reason", "Shutdown"}}}},
                  RestartCause::kNodeLost},
        CauseCase{
            "NodeShutdown", {{"status", {{"reason", "NodeShutdown"}}}}, RestartCause::kNodeLost},
        CauseCase{"NodeLost", {{"status", {{"reason", "NodeLost"}}}}, RestartCause::kNodeLost},
        CauseCase{"EvictionApi",
                  {{"metadata", kDeleting},
                   {"status", {{"conditions", Disruption("EvictionByEvictionAPI")}}}},
                  RestartCause::kEvicted},
        CauseCase{"SchedulerPreemption",
                  {{"metadata", kDeleting},
                   {"status", {{"conditions", Disruption("PreemptionByScheduler")}}}},
                  RestartCause::kPreempted},
        CauseCase{"SchedulerPreemptionKube",
                  {{"status", {{"conditions", Disruption("PreemptionByKubeScheduler")}}}},
                  RestartCause::kPreempted},
        CauseCase{"TaintManager",
                  {{"status", {{"conditions", Disruption("DeletionByTaintManager")}}}},
                  RestartCause::kNodeLost},
        CauseCase{"PodGC",
                  {{"status", {{"conditions", Disruption("DeletionByPodGC")}}}},
                  RestartCause::kNodeLost},
        CauseCase{"KubeletTermination",
                  {{"status", {{"conditions", Disruption("TerminationByKubelet")}}}},
                  RestartCause::kNodeLost},
        // The kubelet's terminations on 1.26+: the condition says the kubelet did it, the
        // status reason says why.
        CauseCase{"KubeletNodePressureEviction",
                  {{"status",
                    {{"phase", "Failed"},
                     {"reason", "Evicted"},
                     {"conditions", Disruption("TerminationByKubelet")}}}},
                  RestartCause::kEvicted},
        CauseCase{"KubeletCriticalPodPreemption",
                  {{"status",
                    {{"phase", "Failed"},
                     {"reason", "Preempting"},
                     {"conditions", Disruption("TerminationByKubelet")}}}},
                  RestartCause::kPreempted},
        CauseCase{"KubeletGracefulNodeShutdown",
                  {{"status",
                    {{"phase", "Failed"},
                     {"reason", "Terminated"},
                     {"conditions", Disruption("TerminationByKubelet")}}}},
                  RestartCause::kNodeLost},
        // The condition decides over the status reason and over the exit code the SIGTERM of
        // the deletion caused.
        CauseCase{"EvictionApiOverAStaleReason",
                  {{"metadata", kDeleting},
                   {"status",
                    {{"reason", "Preempting"},
                     {"containerStatuses", Terminated(75)},
                     {"conditions", Disruption("EvictionByEvictionAPI")}}}},
                  RestartCause::kEvicted},
        CauseCase{"TaintManagerOverADeletion",
                  {{"metadata", kDeleting},
                   {"status",
                    {{"phase", "Failed"},
                     {"containerStatuses", Terminated(143)},
                     {"conditions", Disruption("DeletionByTaintManager")}}}},
                  RestartCause::kNodeLost},
        // A reason newer than this operator: a disruption all the same, never the program's.
        CauseCase{"UnknownDisruptionReason",
                  {{"status",
                    {{"phase", "Failed"},
                     {"containerStatuses", Terminated(1)},
                     {"conditions", Disruption("DeletionBySomethingNew")}}}},
                  RestartCause::kDeleted},
        CauseCase{"DisruptionFalseIsIgnored",
                  {{"status",
                    {{"phase", "Failed"},
                     {"containerStatuses", Terminated(1)},
                     {"conditions", Disruption("EvictionByEvictionAPI", "False")}}}},
                  RestartCause::kFailed},
        // The Eviction API on a cluster before DisruptionTarget (v1.20): only the deletion
        // shows, and the trainer's retryable exit after the SIGTERM it answered.
        CauseCase{"DeletedThenExitedRetryable",
                  {{"metadata", kDeleting},
                   {"status", {{"phase", "Failed"}, {"containerStatuses", Terminated(75)}}}},
                  RestartCause::kDeleted},
        CauseCase{"DeletedStillRunning",
                  {{"metadata", kDeleting}, {"status", {{"phase", "Running"}}}},
                  RestartCause::kDeleted},
        CauseCase{"MalformedFieldsAreNotACrash",
                  {{"metadata", "x"}, {"status", {{"reason", 5}, {"conditions", "y"}}}},
                  RestartCause::kFailed},
        CauseCase{"MalformedConditionEntries",
                  {{"status", {{"conditions", json::array({1, "x", {{"type", 3}}})}}}},
                  RestartCause::kFailed}),
    [](const ::testing::TestParamInfo<CauseCase>& i) { return std::string(i.param.name); });

TEST(RootCauseRank, AProgramFailureBeatsADisruptionWhichBeatsALostPeer) {
  EXPECT_LT(RootCauseRank(RestartCause::kFailed, false),
            RootCauseRank(RestartCause::kEvicted, true));
  EXPECT_LT(RootCauseRank(RestartCause::kDeleted, true),
            RootCauseRank(RestartCause::kFailed, true));
  EXPECT_LT(RootCauseRank(RestartCause::kPreempted, false),
            RootCauseRank(RestartCause::kFailed, true));
}

}  // namespace
}  // namespace tj::controller
