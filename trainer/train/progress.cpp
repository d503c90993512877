#include "trainer/train/progress.h"

#include "common/status_schema.h"
#include "trainer/observe/prometheus_text.h"

namespace tj::train {

nlohmann::json Progress::StatusJson() const {
  namespace k = status_schema;
  ProgressSnapshot s = Get();
  nlohmann::json j = {{k::kRole, s.role},          {k::kState, s.state},
                      {k::kEpoch, s.epoch},        {k::kTotalEpochs, s.total_epochs},
                      {k::kStep, s.step},          {k::kGlobalStep, s.global_step},
                      {k::kLoss, nullptr},         {k::kAccuracy, nullptr},
                      {k::kImagesPerSec, nullptr}, {k::kLastBackup, nullptr},
                      {k::kEvaluation, nullptr}};
  if (s.loss) j[k::kLoss] = *s.loss;
  if (s.accuracy) j[k::kAccuracy] = *s.accuracy;
  if (s.images_per_sec) j[k::kImagesPerSec] = *s.images_per_sec;
  if (s.last_backup) j[k::kLastBackup] = *s.last_backup;
  if (s.evaluation) j[k::kEvaluation] = *s.evaluation;
  return j;
}

std::string Progress::PrometheusText() const {
  ProgressSnapshot s = Get();
  observe::PrometheusText out;
  const observe::PrometheusText::Labels role = {{"role", s.role}};
  out.Gauge("tj_trainer_epoch", "The epoch in progress (1-based).", s.epoch, role);
  out.Gauge("tj_trainer_total_epochs", "Epochs this run trains.", s.total_epochs, role);
  out.Gauge("tj_trainer_step", "Steps done in the epoch in progress.", static_cast<double>(s.step),
            role);
  out.Counter("tj_trainer_global_steps_total", "Optimizer steps done.",
              static_cast<double>(s.global_step), role);
  if (s.loss) out.Gauge("tj_trainer_loss", "Mean training loss of the last epoch.", *s.loss, role);
  if (s.accuracy)
    out.Gauge("tj_trainer_accuracy", "Training accuracy of the last epoch.", *s.accuracy, role);
  if (s.images_per_sec)
    out.Gauge("tj_trainer_images_per_second", "Training throughput of the last epoch.",
              *s.images_per_sec, role);
  if (s.evaluation) {
    out.Gauge("tj_trainer_eval_loss", "Test loss of the newest evaluated checkpoint.",
              s.evaluation->value("loss", 0.0), role);
    out.Gauge("tj_trainer_eval_accuracy", "Test accuracy of the newest evaluated checkpoint.",
              s.evaluation->value("accuracy", 0.0), role);
  }
  return out.str();
}

}  // namespace tj::train
