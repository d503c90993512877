#include "trainer/train/evaluator.h"

#include <numeric>

#include "common/status_schema.h"
#include "trainer/checkpoint/checkpoint_watcher.h"
#include "trainer/nn/cpu_step.h"
#include "trainer/nn/model.h"
#include "trainer/train/export.h"

namespace tj::train {
namespace {

nn::BatchStats EvaluateTestSet(const EvaluatorContext& c, const std::vector<float>& weights) {
  const data::Split& test = c.dataset->test;
  std::vector<uint32_t> all(static_cast<size_t>(test.count));
  std::iota(all.begin(), all.end(), 0u);
  nn::CpuStep step(256, c.pool, *c.kernels);
  return step.Evaluate(weights.data(),
                       {test.images.data(), test.labels.data(), all.data(), test.count});
}

}  // namespace

int RunEvaluator(const EvaluatorContext& c) {
  const Options& o = *c.options;
  if (o.checkpoint_dir.empty()) {
    c.log->Error(
        "the evaluator needs --checkpoint-dir: the directory the chief writes ckpt-<epoch> to");
    return kExitUsage;
  }
  c.progress->Update([&](ProgressSnapshot& p) {
    p.state = "evaluating";
    p.total_epochs = o.epochs;
  });
  checkpoint::CheckpointWatcherOptions wo;
  wo.poll_interval = o.eval_poll_interval;
  wo.key = o.identity.job_key;
  checkpoint::CheckpointWatcher watcher(o.checkpoint_dir, RealClock::Get(), c.log, wo);
  auto evaluate = [&](const checkpoint::TrainingState& state, const std::string& name) -> Status {
    const std::vector<float>* w = state.FindTensor("weights");
    if (w == nullptr || w->size() != nn::Layout::kCount) {
      return Status::Error("checkpoint " + o.checkpoint_dir + "/" + name +
                           " holds no weights of this model");
    }
    nn::BatchStats s = EvaluateTestSet(c, *w);
    const double loss = s.loss_sum / s.rows, accuracy = static_cast<double>(s.correct) / s.rows;
    nlohmann::ordered_json ev = {{"event", "evaluation"},
                                 {"checkpoint", name},
                                 {"epoch", state.epoch},
                                 {"loss", loss},
                                 {"accuracy", accuracy}};
    c.log->Emit(ev);
    c.progress->Update([&](ProgressSnapshot& p) {
      p.epoch = static_cast<int>(state.epoch);
      namespace k = status_schema;
      p.evaluation = nlohmann::json{{k::kCheckpoint.key, name},
                                    {k::kEpoch.key, state.epoch},
                                    {k::kLoss.key, loss},
                                    {k::kAccuracy.key, accuracy}};
    });
    if (c.scalars) {
      c.scalars("epoch_loss", state.epoch, static_cast<float>(loss));
      c.scalars("epoch_accuracy", state.epoch, static_cast<float>(accuracy));
    }
    return Status::Ok();
  };
  auto result = watcher.Run(evaluate);
  if (!result.ok()) {
    c.log->Error(result.status().message());
    return kExitFailure;
  }
  c.progress->Update([](ProgressSnapshot& p) { p.state = "succeeded"; });
  return kExitOk;
}

int EvaluateExportedModel(const EvaluatorContext& c) {
  auto weights = LoadExportedModel(c.options->model_dir);
  if (!weights.ok()) {
    c.log->Error(weights.status().message());
    return kExitFailure;
  }
  nn::BatchStats s = EvaluateTestSet(c, *weights);
  c.log->Emit({{"event", "evaluation"},
               {"model", c.options->model_dir},
               {"loss", s.loss_sum / s.rows},
               {"accuracy", static_cast<double>(s.correct) / s.rows},
               {"weights_sha256", nn::WeightsDigest(weights->data())}});
  return kExitOk;
}

}  // namespace tj::train
