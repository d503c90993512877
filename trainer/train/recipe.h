// What a declared model trains with (Options::recipe: --optimizer, --momentum, --nesterov,
// --weight-decay, --lr-schedule, --label-smoothing): the flags' checks, the schedule they
// name, and what a backup's fingerprint records of them. Pure.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "trainer/nn/optimizer.h"
#include "trainer/train/options.h"

namespace tj::train {

// "adam" or "sgd".
const char* OptimizerName(OptimizerKind kind);

// Empty when the recipe flags make sense for a run of a declared model (`declared`) or of the
// built-in one (which takes the defaults only), else the message of a usage error (exit 2)
// naming the flag, its value and what to do.
std::string RecipeFlagsError(const RecipeOptions& recipe, bool declared);

// The schedule of --lr-schedule; the seeds' when the text does not parse (RecipeFlagsError
// refuses it first).
nn::LearningRateSchedule ScheduleOf(const RecipeOptions& recipe);

// The fields of a backup's fingerprint for `recipe`: optimizer, momentum, nesterov,
// weight_decay, lr_schedule (normalised), label_smoothing, each only when it differs from the
// default, so that a run with the defaults keeps the fingerprint (and resumes the backups) of
// before these flags existed. An empty object for the defaults.
nlohmann::json RecipeFingerprint(const RecipeOptions& recipe);

}  // namespace tj::train
