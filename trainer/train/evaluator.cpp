#include "trainer/train/evaluator.h"

#include <numeric>

#include "common/status_schema.h"
#include "trainer/checkpoint/checkpoint_watcher.h"
#include "trainer/nn/cpu_step.h"
#include "trainer/nn/model.h"
#include "trainer/train/export.h"

namespace tj::train {
namespace {

constexpr int kEvaluationRows = 256;

StatusOr<nn::BatchStats> EvaluateTestSet(const EvaluatorContext& c,
                                         const std::vector<float>& weights,
                                         const std::vector<float>& state) {
  if (c.model != nullptr) {
    return EvaluateDeclaredModel(*c.model, weights, state, *c.data->eval,
                                 PrefetchOptionsOf(*c.options), kEvaluationRows, c.pool, *c.kernels,
                                 static_cast<float>(c.options->recipe.label_smoothing));
  }
  const data::Split& test = c.dataset->test;
  std::vector<uint32_t> all(static_cast<size_t>(test.count));
  std::iota(all.begin(), all.end(), 0u);
  nn::CpuStep step(kEvaluationRows, c.pool, *c.kernels);
  return step.Evaluate(weights.data(),
                       {test.images.data(), test.labels.data(), all.data(), test.count});
}

// Empty when `fingerprint` (a checkpoint's) is of the model being evaluated, else why not
// and what to do.
std::string OtherModel(const EvaluatorContext& c, const nlohmann::json& fingerprint) {
  const auto sha = fingerprint.is_object() ? fingerprint.find("model_sha256") : fingerprint.end();
  const bool declared = sha != fingerprint.end() && sha->is_string();
  const std::string theirs = declared ? "the declared model '" +
                                            fingerprint.value("model", std::string("?")) +
                                            "' (model_sha256 " + sha->get<std::string>() + ")"
                                      : "the built-in seeds-cnn";
  if (c.model == nullptr) {
    if (!declared) return "";
    return "was written by a run that trains " + theirs +
           ": give the evaluator the trainers' --model-config (or TJ_MODEL_CONFIG)";
  }
  if (declared && sha->get<std::string>() == c.model->sha256) return "";
  return "was written by a run that trains " + theirs + ", and this evaluator's --model-config " +
         c.model->path + " is '" + c.model->graph.name + "' (model_sha256 " + c.model->sha256 +
         "): give the evaluator the trainers' model (or none for the built-in one)";
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
    if (std::string other = OtherModel(c, state.fingerprint); !other.empty()) {
      return Status::Error("checkpoint " + o.checkpoint_dir + "/" + name + " " + other);
    }
    const std::vector<float>* w = state.FindTensor("weights");
    const std::vector<float>* model_state = state.FindTensor(kModelStateTensor);
    const size_t count = c.model ? c.model->graph.parameter_count : nn::Layout::kCount;
    const size_t state_count = c.model ? c.model->graph.state_count : 0;
    if (w == nullptr || w->size() != count ||
        (model_state ? model_state->size() : 0) != state_count) {
      return Status::Error("checkpoint " + o.checkpoint_dir + "/" + name +
                           " holds no weights of this model");
    }
    StatusOr<nn::BatchStats> evaluated =
        EvaluateTestSet(c, *w, model_state ? *model_state : std::vector<float>{});
    if (!evaluated.ok()) return evaluated.status();
    const nn::BatchStats s = *evaluated;
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
  DeclaredWeights loaded;
  if (c.model != nullptr) {
    auto read = LoadExportedDeclaredModel(c.options->model_dir, *c.model);
    if (!read.ok()) {
      c.log->Error(read.status().message());
      return kExitFailure;
    }
    loaded = std::move(*read);
  } else {
    auto weights = LoadExportedModel(c.options->model_dir);
    if (!weights.ok()) {
      c.log->Error(weights.status().message());
      return kExitFailure;
    }
    loaded.weights = std::move(*weights);
  }
  StatusOr<nn::BatchStats> evaluated = EvaluateTestSet(c, loaded.weights, loaded.state);
  if (!evaluated.ok()) {
    c.log->Error(evaluated.status().message());
    return kExitFailure;
  }
  const nn::BatchStats s = *evaluated;
  c.log->Emit(
      {{"event", "evaluation"},
       {"model", c.options->model_dir},
       {"loss", s.loss_sum / s.rows},
       {"accuracy", static_cast<double>(s.correct) / s.rows},
       {"weights_sha256", nn::WeightsDigest(loaded.weights.data(), loaded.weights.size())}});
  return kExitOk;
}

}  // namespace tj::train
