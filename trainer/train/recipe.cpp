#include "trainer/train/recipe.h"

#include <cmath>
#include <sstream>

namespace tj::train {
namespace {

std::string Number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

const char* OptimizerName(OptimizerKind kind) {
  return kind == OptimizerKind::kSgd ? "sgd" : "adam";
}

std::string RecipeFlagsError(const RecipeOptions& r, bool declared) {
  const RecipeOptions defaults;
  if (!declared) {
    const char* flag = r.optimizer != defaults.optimizer               ? "--optimizer"
                       : r.momentum != defaults.momentum               ? "--momentum"
                       : r.nesterov                                    ? "--nesterov"
                       : r.weight_decay != defaults.weight_decay       ? "--weight-decay"
                       : r.lr_schedule != defaults.lr_schedule         ? "--lr-schedule"
                       : r.label_smoothing != defaults.label_smoothing ? "--label-smoothing"
                                                                       : nullptr;
    if (flag == nullptr) return "";
    return std::string(flag) +
           " applies to declared models only (--model-config): the built-in seeds' CNN trains "
           "with Adam and the seeds' schedule; drop the flag or declare a model";
  }
  if (!(r.momentum >= 0.0 && r.momentum < 1.0)) {
    return "--momentum " + Number(r.momentum) + ": expected a number in [0, 1) (e.g. 0.9)";
  }
  if (r.optimizer != OptimizerKind::kSgd && (r.momentum != 0.0 || r.nesterov)) {
    return std::string(r.nesterov ? "--nesterov" : "--momentum " + Number(r.momentum)) +
           ": momentum is SGD's; add --optimizer sgd, or drop the flag (Adam keeps its own "
           "moments)";
  }
  if (r.nesterov && r.momentum == 0.0) {
    return "--nesterov: Nesterov momentum needs --momentum above 0 (e.g. --momentum 0.9); add "
           "it or drop --nesterov";
  }
  if (!(r.weight_decay >= 0.0 && std::isfinite(r.weight_decay))) {
    return "--weight-decay " + Number(r.weight_decay) +
           ": expected a finite number >= 0 (e.g. 5e-4; 0: off)";
  }
  if (!(r.label_smoothing >= 0.0 && r.label_smoothing < 1.0)) {
    return "--label-smoothing " + Number(r.label_smoothing) +
           ": expected a number in [0, 1) (e.g. 0.1; 0: off)";
  }
  if (auto schedule = nn::LearningRateSchedule::Parse(r.lr_schedule); !schedule.ok()) {
    return "--lr-schedule: " + schedule.status().message();
  }
  return "";
}

nn::LearningRateSchedule ScheduleOf(const RecipeOptions& recipe) {
  auto schedule = nn::LearningRateSchedule::Parse(recipe.lr_schedule);
  return schedule.ok() ? *schedule : nn::LearningRateSchedule();
}

nlohmann::json RecipeFingerprint(const RecipeOptions& r) {
  const RecipeOptions defaults;
  nlohmann::json f = nlohmann::json::object();
  if (r.optimizer != defaults.optimizer) f["optimizer"] = OptimizerName(r.optimizer);
  if (r.momentum != defaults.momentum) f["momentum"] = r.momentum;
  if (r.nesterov) f["nesterov"] = true;
  if (r.weight_decay != defaults.weight_decay) f["weight_decay"] = r.weight_decay;
  const std::string schedule = ScheduleOf(r).ToString();
  if (schedule != nn::LearningRateSchedule().ToString()) f["lr_schedule"] = schedule;
  if (r.label_smoothing != defaults.label_smoothing) f["label_smoothing"] = r.label_smoothing;
  return f;
}

}  // namespace tj::train
