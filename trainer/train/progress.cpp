#include "trainer/train/progress.h"

#include <optional>

#include "common/prometheus_text.h"
#include "common/status_schema.h"
#include "common/version.h"

namespace tj::train {

nlohmann::json Progress::StatusJson() const {
  namespace k = status_schema;
  ProgressSnapshot s = Get();
  nlohmann::json j = {{k::kRole.key, s.role},
                      {k::kState.key, s.state},
                      {k::kCpuTarget.key, s.cpu_target},
                      {k::kEpoch.key, s.epoch},
                      {k::kTotalEpochs.key, s.total_epochs},
                      {k::kStep.key, s.step},
                      {k::kGlobalStep.key, s.global_step},
                      {k::kLoss.key, nullptr},
                      {k::kAccuracy.key, nullptr},
                      {k::kImagesPerSec.key, nullptr},
                      {k::kLastBackup.key, nullptr},
                      {k::kEvaluation.key, nullptr}};
  if (s.loss) j[k::kLoss.key] = *s.loss;
  if (s.accuracy) j[k::kAccuracy.key] = *s.accuracy;
  if (s.images_per_sec) j[k::kImagesPerSec.key] = *s.images_per_sec;
  if (s.last_backup) j[k::kLastBackup.key] = *s.last_backup;
  if (s.evaluation) j[k::kEvaluation.key] = *s.evaluation;
  return j;
}

std::string Progress::PrometheusText() const {
  ProgressSnapshot s = Get();
  tj::PrometheusText out;
  const tj::PrometheusText::Labels role = {{"role", s.role}};
  // A gauge not measured yet (before the first epoch ends, before the first evaluation) is
  // declared without a sample: every name this trainer exports is on every scrape.
  auto gauge = [&](const char* name, const char* help, std::optional<double> value) {
    if (value) {
      out.Gauge(name, help, *value, role);
    } else {
      out.Declare(name, help, "gauge");
    }
  };
  // Build-info style: always 1, the facts in the labels.
  out.Gauge("tj_trainer_build_info",
            "Always 1: the trainer's version and the SIMD target its CPU kernels run.", 1.0,
            {{"role", s.role}, {"version", kVersionText}, {"cpu_target", s.cpu_target}});
  out.Gauge("tj_trainer_epoch", "The epoch in progress (1-based).", s.epoch, role);
  out.Gauge("tj_trainer_total_epochs", "Epochs this run trains.", s.total_epochs, role);
  out.Gauge("tj_trainer_step", "Steps done in the epoch in progress.", static_cast<double>(s.step),
            role);
  out.Counter("tj_trainer_global_steps_total", "Optimizer steps done.",
              static_cast<double>(s.global_step), role);
  gauge("tj_trainer_loss", "Mean training loss of the last epoch.", s.loss);
  gauge("tj_trainer_accuracy", "Training accuracy of the last epoch.", s.accuracy);
  gauge("tj_trainer_images_per_second", "Training throughput of the last epoch.", s.images_per_sec);
  std::optional<double> eval_loss, eval_accuracy;
  if (s.evaluation) {
    eval_loss = s.evaluation->value("loss", 0.0);
    eval_accuracy = s.evaluation->value("accuracy", 0.0);
  }
  gauge("tj_trainer_eval_loss", "Test loss of the newest evaluated checkpoint.", eval_loss);
  gauge("tj_trainer_eval_accuracy", "Test accuracy of the newest evaluated checkpoint.",
        eval_accuracy);
  return out.str();
}

}  // namespace tj::train
