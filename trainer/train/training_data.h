// The examples a declared model (--model-config) trains and is evaluated on, opened as the
// dataset flags say (Options::data): IDX, NumPy .npz/.npy, image folders or TFRecord files,
// each split a data::ImageDataset that the step's BatchPrefetcher reads. The built-in seeds'
// CNN keeps its own IDX path (data::LoadDataset) and takes none of this.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "trainer/data/batch_prefetcher.h"
#include "trainer/data/dataset.h"
#include "trainer/data/epoch_order.h"
#include "trainer/train/options.h"
#include "trainer/train/step_backend.h"

namespace tj::train {

struct TrainingData {
  // Null for an evaluator given no --train-data: it evaluates, so it opens only `eval`.
  std::unique_ptr<data::ImageDataset> train;
  std::unique_ptr<data::ImageDataset> eval;  // the end-of-epoch test set and the evaluator's

  // The set whose shape and classes the model must fit: the training set, else the
  // evaluation set.
  const data::ImageDataset& Reference() const { return train ? *train : *eval; }
};

// "idx", "npz", "npy", "folder", "tfrecord"; ParseDatasetFormat is its inverse.
using data::DatasetFormatName;
using data::ParseDatasetFormat;

// Empty when the dataset flags make sense together for a run of a declared model (`declared`)
// or of the built-in one, before anything is opened; else the message of a usage error (exit
// 2) naming the flag, its value and what to do. Paths that do not exist are named here. An
// evaluating run (the evaluator, --evaluate-only) may give --eval-data alone.
std::string DatasetFlagsError(const Options& options, bool declared, bool evaluating = false);

// Opens the training and evaluation sets (reading what each reader reads when it opens: see
// docs/trainer.md); an evaluating run given no --train-data opens the evaluation set alone,
// fitted to the flags' shape. Errors name the file and what is wrong in it.
StatusOr<TrainingData> OpenTrainingData(const Options& options, bool evaluating = false);

// Empty when the opened sets agree with the flags (--image-size, --image-channels,
// --num-classes, --normalize-*) and with each other (shape, classes), else the message of a
// usage error.
std::string TrainingDataError(const TrainingData& data, const Options& options);

// What a backup's fingerprint records of the data: dataset_sha256 (the training set's
// digest()), dataset_format, image_shape [h, w, c], classes, and the augmentation and
// normalisation, which change every batch's bytes. The evaluation set is not part of it.
nlohmann::json DatasetFingerprint(const TrainingData& data, const Options& options);

// The prefetcher's options of a run: its seed (a stream of options.seed of its own), the
// augmentation, normalisation and thread count of the flags.
data::PrefetchOptions PrefetchOptionsOf(const Options& options);

// The declared-model backend's input for a replica of `plan`: the training set, the
// prefetcher's options, the flags' prefetch depth and the epoch's step count.
DeclaredInput DeclaredInputOf(const Options& options, const TrainingData& data,
                              const data::ShardPlan& plan);

// The {"event": "dataset", ...} line a run prints once the sets are open.
nlohmann::ordered_json DatasetEvent(const TrainingData& data, const Options& options);

}  // namespace tj::train
