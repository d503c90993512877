#include "trainer/train/training_data.h"

#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "common/random.h"
#include "trainer/data/open_dataset.h"

namespace tj::train {
namespace {

// The augmentation draws' stream: apart from the epoch orders' (DeriveSeed(seed, epoch)).
constexpr uint64_t kAugmentStream = 0x4155474d454e5453ULL;  // "AUGMENTS"

// What --train-data / --eval-data name for `format`, for messages.
const char* PathMeaning(DatasetFormat format) {
  switch (format) {
    case DatasetFormat::kIdx:
      return "a directory of MNIST-format IDX files";
    case DatasetFormat::kNpz:
      return "an .npz of x_train, y_train, x_test, y_test";
    case DatasetFormat::kNpy:
      return "IMAGES.npy,LABELS.npy";
    case DatasetFormat::kFolder:
      return "the root of <class>/<image> folders";
    case DatasetFormat::kTfRecord:
      return "a TFRecord file or a directory of them";
  }
  return "";
}

bool EncodedImages(DatasetFormat format) {
  return format == DatasetFormat::kFolder || format == DatasetFormat::kTfRecord;
}

// Empty when every file `flag`'s `value` names exists, else the usage message.
std::string MissingPath(const char* flag, const std::string& value, DatasetFormat format) {
  std::vector<std::string> paths = {value};
  if (format == DatasetFormat::kNpy) {
    std::string images, labels;
    if (!data::SplitNpyPair(value, &images, &labels)) {
      return std::string(flag) + " " + value +
             ": --dataset-format npy takes two files, IMAGES.npy,LABELS.npy (comma-separated)";
    }
    paths = {images, labels};
  }
  for (const std::string& path : paths) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return std::string(flag) + " " + value + ": " + path +
             " does not exist; give --dataset-format " + DatasetFormatName(format) + " " +
             PathMeaning(format);
    }
  }
  return "";
}

// `result`'s value into `out`, or its error.
template <typename T>
Status Assign(StatusOr<T> result, T* out) {
  if (!result.ok()) return result.status();
  *out = std::move(*result);
  return Status::Ok();
}

std::string ShapeText(data::ImageShape s) { return s.ToString(); }

nlohmann::json ShapeJson(data::ImageShape s) { return {s.height, s.width, s.channels}; }

}  // namespace

std::string DatasetFlagsError(const Options& o, bool declared, bool evaluating) {
  const DatasetOptions& d = o.data;
  const std::string format = std::string("--dataset-format ") + DatasetFormatName(d.format);
  if (!declared) {
    if (d.format != DatasetFormat::kIdx) {
      return format +
             ": the built-in seeds' CNN trains on the IDX files of --data-dir only; give "
             "--model-config a Keras model to train on other data, or drop the flag";
    }
    const bool shaped = d.image.height > 0 || d.image.channels > 0 || d.classes > 0;
    const bool augmented = d.augment.pad > 0 || d.augment.flip || !d.normalization.mean.empty() ||
                           !d.normalization.stddev.empty();
    if (shaped || augmented || !d.eval_path.empty()) {
      return std::string(shaped      ? "--image-size, --image-channels and --num-classes"
                         : augmented ? "--augment-crop-pad, --augment-flip and --normalize-*"
                                     : "--eval-data") +
             " apply to declared models (--model-config): the built-in seeds' CNN reads 28x28x1 "
             "images of 10 classes from --data-dir, unaugmented; drop the flag or declare a "
             "model";
    }
    return "";
  }
  if (d.format == DatasetFormat::kIdx) {
    if (!d.eval_path.empty()) {
      return "--eval-data " + d.eval_path + ": " + format +
             " reads both splits (train and t10k) from one directory, --train-data or "
             "--data-dir; drop --eval-data";
    }
    return MissingPath(d.train_path.empty() ? "--data-dir" : "--train-data",
                       d.train_path.empty() ? o.data_dir : d.train_path, d.format);
  }
  const bool eval_alone = evaluating && d.train_path.empty() && !d.eval_path.empty();
  if (d.train_path.empty() && !eval_alone) {
    return format + " needs --train-data: " + PathMeaning(d.format) +
           (evaluating ? " (an evaluator may give --eval-data alone)" : "");
  }
  if (!eval_alone) {
    if (std::string e = MissingPath("--train-data", d.train_path, d.format); !e.empty()) return e;
  }
  if (d.eval_path.empty() && d.format != DatasetFormat::kNpz) {
    return format + " needs --eval-data, the evaluation set: " + PathMeaning(d.format);
  }
  if (!d.eval_path.empty()) {
    if (std::string e = MissingPath("--eval-data", d.eval_path, d.format); !e.empty()) return e;
  }
  if (!EncodedImages(d.format) && d.image.channels > 0 && d.image.channels != 1 &&
      d.image.channels != 3) {
    return "--image-channels " + std::to_string(d.image.channels) + ": 1 or 3";
  }
  const size_t channels = d.image.channels > 0 ? static_cast<size_t>(d.image.channels) : 3;
  if (EncodedImages(d.format)) {
    for (const auto& [flag, values] : {std::pair{"--normalize-mean", &d.normalization.mean},
                                       std::pair{"--normalize-std", &d.normalization.stddev}}) {
      if (!values->empty() && values->size() != channels) {
        return std::string(flag) + ": " + std::to_string(values->size()) +
               " values for images of " + std::to_string(channels) +
               " channels (--image-channels): give one value per channel";
      }
    }
  }
  return "";
}

// One split, "train" or "test", of the dataset at `path` as --train-data or --eval-data names
// it (an IDX directory and an .npz hold both), encoded images fitted to `shape` (sides of 0:
// the first image's), labels checked against `classes` (0: inferred).
StatusOr<std::unique_ptr<data::ImageDataset>> OpenSplit(const Options& o, const std::string& path,
                                                        const char* split, data::ImageShape shape,
                                                        int classes) {
  data::OpenOptions open;
  open.split = split;
  open.shape = shape;
  open.classes = classes;
  open.limits = o.data.limits;
  return data::OpenDataset(o.data.format, path, open);
}

StatusOr<TrainingData> OpenTrainingData(const Options& o, bool evaluating) {
  const DatasetOptions& d = o.data;
  TrainingData out;
  if (d.format == DatasetFormat::kIdx) {
    const std::string dir = d.train_path.empty() ? o.data_dir : d.train_path;
    TJ_RETURN_IF_ERROR(Assign(OpenSplit(o, dir, "train", {}, 0), &out.train));
    TJ_RETURN_IF_ERROR(Assign(OpenSplit(o, dir, "test", {}, 0), &out.eval));
    return out;
  }
  const data::ImageShape flags_shape{d.image.height, d.image.width,
                                     d.image.channels > 0 ? d.image.channels : 3};
  if (evaluating && d.train_path.empty()) {  // an evaluator's: the evaluation set alone
    TJ_RETURN_IF_ERROR(
        Assign(OpenSplit(o, d.eval_path, "test", flags_shape, d.classes), &out.eval));
    return out;
  }
  TJ_RETURN_IF_ERROR(
      Assign(OpenSplit(o, d.train_path, "train", flags_shape, d.classes), &out.train));
  // The evaluation set fitted to the training set's shape, with its classes; an .npz given
  // alone holds both.
  const std::string& eval_path =
      d.eval_path.empty() && d.format == DatasetFormat::kNpz ? d.train_path : d.eval_path;
  TJ_RETURN_IF_ERROR(
      Assign(OpenSplit(o, eval_path, "test", out.train->shape(), out.train->classes()), &out.eval));
  return out;
}

std::string TrainingDataError(const TrainingData& data, const Options& o) {
  const DatasetOptions& d = o.data;
  const data::ImageDataset& train = data.Reference();
  const data::ImageShape shape = train.shape();
  const std::string holds = train.source() + " holds " + ShapeText(shape) + " images";
  if (d.image.height > 0 && (d.image.height != shape.height || d.image.width != shape.width)) {
    return "--image-size " + std::to_string(d.image.height) + "x" + std::to_string(d.image.width) +
           ": " + holds + "; arrays are not resized: drop the flag or give --image-size " +
           std::to_string(shape.height) + "x" + std::to_string(shape.width);
  }
  if (d.image.channels > 0 && d.image.channels != shape.channels) {
    return "--image-channels " + std::to_string(d.image.channels) + ": " + holds +
           "; arrays are not converted: drop the flag or give --image-channels " +
           std::to_string(shape.channels);
  }
  if (d.classes > 0 && d.classes != train.classes()) {
    return "--num-classes " + std::to_string(d.classes) + ": " + train.source() + " has " +
           std::to_string(train.classes()) + " classes (one per class folder, or as the files " +
           "say): drop the flag or give --num-classes " + std::to_string(train.classes());
  }
  for (const auto& [flag, values] : {std::pair{"--normalize-mean", &d.normalization.mean},
                                     std::pair{"--normalize-std", &d.normalization.stddev}}) {
    if (!values->empty() && values->size() != static_cast<size_t>(shape.channels)) {
      return std::string(flag) + ": " + std::to_string(values->size()) + " values, and " + holds +
             ": give one value per channel";
    }
  }
  const data::ImageDataset& eval = *data.eval;
  if (data.train && (!(eval.shape() == shape) || eval.classes() != train.classes())) {
    return "the evaluation set " + eval.source() + " has " + ShapeText(eval.shape()) +
           " images of " + std::to_string(eval.classes()) + " classes, and the training set " +
           train.source() + " " + ShapeText(shape) + " images of " +
           std::to_string(train.classes()) +
           " classes: give --eval-data a set of the training set's shape and classes";
  }
  return "";
}

nlohmann::json DatasetFingerprint(const TrainingData& data, const Options& o) {
  const DatasetOptions& d = o.data;
  return {{"dataset_sha256", data.train->digest()},
          {"dataset_format", DatasetFormatName(d.format)},
          {"image_shape", ShapeJson(data.train->shape())},
          {"classes", data.train->classes()},
          {"augment_crop_pad", d.augment.pad},
          {"augment_flip", d.augment.flip},
          {"normalize_mean", d.normalization.mean},
          {"normalize_std", d.normalization.stddev}};
}

data::PrefetchOptions PrefetchOptionsOf(const Options& o) {
  data::PrefetchOptions p;
  p.seed = DeriveSeed(o.seed, kAugmentStream);
  p.augment = o.data.augment;
  p.normalization = o.data.normalization;
  // One of the two given: the other's default for each channel.
  if (p.normalization.mean.empty() && !p.normalization.stddev.empty())
    p.normalization.mean.assign(p.normalization.stddev.size(), 0.0f);
  if (p.normalization.stddev.empty() && !p.normalization.mean.empty())
    p.normalization.stddev.assign(p.normalization.mean.size(), 1.0f);
  p.threads = o.data.threads;
  return p;
}

DeclaredInput DeclaredInputOf(const Options& options, const TrainingData& data,
                              const data::ShardPlan& plan) {
  return {.dataset = data.train.get(),
          .prefetch = PrefetchOptionsOf(options),
          .prefetch_batches = options.data.prefetch_batches,
          .steps_per_epoch = plan.StepsPerEpoch(data.train->size())};
}

nlohmann::ordered_json DatasetEvent(const TrainingData& data, const Options& o) {
  nlohmann::ordered_json event = {{"event", "dataset"},
                                  {"format", DatasetFormatName(o.data.format)}};
  if (data.train) {
    event["train"] = data.train->source();
    event["train_examples"] = data.train->size();
  }
  event["eval"] = data.eval->source();
  event["eval_examples"] = data.eval->size();
  event["image_shape"] = ShapeJson(data.Reference().shape());
  event["classes"] = data.Reference().classes();
  if (data.train) event["dataset_sha256"] = data.train->digest();
  return event;
}

}  // namespace tj::train
