// status.progress end to end in one process: a trainer's real /status server (trainer/observe),
// read over a loopback socket by the operator's bounded reader, copied by the reconciler.
#include <gtest/gtest.h>

#include "common/status_schema.h"
#include "operator/controller/executor.h"
#include "operator/controller/reconciler.h"
#include "operator/controller/tenant_reads.h"
#include "tests/support/subprocess.h"
#include "tests/unit/operator/controller/reconciler_world.h"
#include "trainer/observe/status_server.h"
#include "trainer/train/progress.h"

namespace tj::controller {
namespace {

// common/status_schema.h end to end: the trainer's own Progress served by its own status
// server, read by the operator's HttpGetJson, turned into status.progress and
// status.evaluation by the reconciler. A field renamed on one side fails here.
TEST(Reconcile, StatusRoundTripsFromTheTrainersStatusServer) {
  train::Progress chief, evaluator;
  chief.Update([](train::ProgressSnapshot& p) {
    p.role = "chief";
    p.state = "training";
    p.epoch = 2;
    p.total_epochs = 3;
    p.step = 17;
    p.global_step = 117;
    p.loss = 0.25;
    p.accuracy = 0.875;
    p.images_per_sec = 1024.5;
    p.last_backup = json{{status_schema::kEpoch.key, 2},
                         {status_schema::kStep.key, 10},
                         {status_schema::kGlobalStep.key, 110}};
  });
  evaluator.Update([](train::ProgressSnapshot& p) {
    p.role = "evaluator";
    p.evaluation = json{{status_schema::kCheckpoint.key, "ckpt-1"},
                        {status_schema::kEpoch.key, 1},
                        {status_schema::kLoss.key, 0.5},
                        {status_schema::kAccuracy.key, 0.75}};
  });
  World w;
  w.Running();
  for (const auto& [pod, served] :
       {std::pair{"mnist-worker-0", &chief}, std::pair{"mnist-evaluator-0", &evaluator}}) {
    auto* progress = served;  // clang before 16 cannot capture a structured binding
    const int port = ::tj::testing::FreePort();
    observe::StatusServer server(
        port, [progress] { return progress->StatusJson(); }, [] { return std::string(); },
        "127.0.0.1");
    ASSERT_TRUE(server.Start().ok());
    auto got = HttpGetJson("127.0.0.1", port, "/status", milliseconds(3000));
    ASSERT_TRUE(got.has_value()) << pod;
    w.in.trainer_status[pod] = *got;
  }
  auto s = StatusOf(Reconcile(w.in));
  EXPECT_EQ(s.progress, json({{"epoch", 2},
                              {"totalEpochs", 3},
                              {"step", 17},
                              {"globalStep", 117},
                              {"loss", 0.25},
                              {"accuracy", 0.875},
                              {"imagesPerSecond", 1024.5},
                              {"lastBackup",
                               {{"epoch", 2},
                                {"step", 10},
                                {"globalStep", 110},
                                {"time", kube::FormatTime(w.in.now)}}}}));
  EXPECT_EQ(s.evaluation,
            json({{"checkpoint", "ckpt-1"}, {"epoch", 1}, {"loss", 0.5}, {"accuracy", 0.75}}));
}

}  // namespace
}  // namespace tj::controller
