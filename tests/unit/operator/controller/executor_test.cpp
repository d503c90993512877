// The executor's pure helpers: reading the final evaluation from a trainer log; metrics text.
// The executor itself runs against a real API server in tests/e2e/operator/.
#include "operator/controller/executor.h"

#include <gtest/gtest.h>

#include "operator/controller/metrics.h"

namespace tj::controller {
namespace {

TEST(LastEvaluation, TakesTheLastEvaluationLine) {
  const std::string log =
      "{\"event\":\"evaluation\",\"checkpoint\":\"ckpt-1\",\"epoch\":1,\"loss\":0.5,"
      "\"accuracy\":0.8}\n"
      "not json \"evaluation\"\n"
      "{\"event\":\"evaluation\",\"checkpoint\":\"ckpt-final\",\"epoch\":2,\"loss\":0.4,"
      "\"accuracy\":0.85}\n"
      "{\"event\":\"train_end\"}\n";
  nlohmann::json e = LastEvaluation(log);
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["checkpoint"], "ckpt-final");
  EXPECT_EQ(e["accuracy"], 0.85);
  EXPECT_TRUE(LastEvaluation("").is_null());
  EXPECT_TRUE(LastEvaluation("{\"event\":\"evaluation\",\"model\":\"/x\"}").is_null());
}

TEST(OperatorMetrics, ControllerRuntimeNamesAndJobCounters) {
  OperatorMetrics m;
  m.ReconcileDone("success", 0.003);
  m.ReconcileDone("error", 0.2);
  m.ReconcileDone("requeue_after", 3);
  m.JobCreated();
  m.JobRestarted();
  m.JobRestarted();
  const std::string t = m.Render({4, 10, 2}, true);
  for (const char* want :
       {"controller_runtime_reconcile_total{controller=\"trainingjob\",result=\"success\"} 1",
        "controller_runtime_reconcile_total{controller=\"trainingjob\",result=\"error\"} 1",
        "controller_runtime_reconcile_errors_total{controller=\"trainingjob\"} 1",
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"trainingjob\",le=\"0.005\"} "
        "1",
        "controller_runtime_reconcile_time_seconds_count{controller=\"trainingjob\"} 3",
        "workqueue_depth{name=\"trainingjob\"} 4", "workqueue_adds_total{name=\"trainingjob\"} 10",
        "workqueue_retries_total{name=\"trainingjob\"} 2",
        "leader_election_master_status{name=\"tj-operator\"} 1", "tj_operator_jobs_created_total 1",
        "tj_operator_jobs_restarted_total 2"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
  }
}

}  // namespace
}  // namespace tj::controller
