// What a backup records of the run that wrote it, and whether a run may resume it: the model,
// the data, the seed, and how the global batch is cut into shards (the worker count of a run
// without elastic mode, the shard count of one in elastic mode). Pure.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "trainer/data/idx_reader.h"
#include "trainer/train/declared_model.h"
#include "trainer/train/options.h"

namespace tj::train {

// The configuration fingerprint of a run with `replicas` replicas. Without elastic mode it is
// what it was before elastic mode existed: {model, parameters, batch_size, workers,
// steps_per_epoch_cap, seed, dataset_sha256}. In elastic mode it adds elastic_shards and
// global_batch; workers then only says who wrote the backup. A declared model (`model`, null
// for the built-in one) adds model_sha256, and model is its name; with --initial-weights also
// initial_weights_sha256 (the file's), so a resume with other initial weights is refused, and
// the recipe's fields that differ from the defaults (recipe.h, RecipeFingerprint).
nlohmann::json TrainingFingerprint(const Options& options, int replicas,
                                   const data::Dataset& dataset,
                                   const DeclaredModel* model = nullptr);
// The same with the data's fields given: `dataset`, an object, replaces dataset_sha256 (a
// declared model's run records training_data.h's DatasetFingerprint: the digest, format, image
// shape, classes, augmentation and normalisation).
nlohmann::json TrainingFingerprint(const Options& options, int replicas,
                                   const nlohmann::json& dataset, const DeclaredModel* model);

// nullopt when a run of fingerprint `run` may resume a backup of fingerprint `backup`; else
// why not and what to do (a clause that follows "backup <path> "). A fingerprint's shards are
// its elastic_shards, or its workers without elastic mode (a worker is then one shard): the
// global batch is shards x batch_size, cut the same way and summed in the same order at every
// worker count of an elastic run. So a backup resumes when every other field is equal and the
// shards are: in elastic mode at any worker count (that divides the shards), without it only
// at as many workers as shards. Either mode resumes the other's backup of the same shards.
std::optional<std::string> ResumeRefusal(const nlohmann::json& run, const nlohmann::json& backup);

}  // namespace tj::train
