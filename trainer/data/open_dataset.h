// Every dataset format the trainer reads, named and opened one way: tj-trainer's dataset flags
// (--dataset-format, --train-data, --eval-data) and tj-dataset's FORMAT:PATH sources both open
// their datasets through OpenDataset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "trainer/data/dataset.h"

namespace tj::data {

enum class DatasetFormat { kIdx, kNpz, kNpy, kFolder, kTfRecord };

// "idx", "npz", "npy", "folder", "tfrecord"; ParseDatasetFormat is its inverse.
const char* DatasetFormatName(DatasetFormat format);
bool ParseDatasetFormat(const std::string& name, DatasetFormat* format);

// The two paths of an .npy pair "IMAGES,LABELS"; false when it is not two non-empty paths.
bool SplitNpyPair(const std::string& value, std::string* images, std::string* labels);

// What one file may make a reader allocate (tj-trainer's --max-image-bytes, --max-record-bytes,
// --max-array-bytes).
struct DatasetLimits {
  uint64_t max_image_bytes = uint64_t{64} << 20;   // one file of an image folder
  uint64_t max_record_bytes = uint64_t{64} << 20;  // one TFRecord record
  uint64_t max_array_bytes = uint64_t{4} << 30;    // one NumPy array
};

struct OpenOptions {
  // "train" or "test": which split of an IDX directory (train-* or t10k-*) or of an .npz
  // (x_train/y_train or x_test/y_test). The other formats hold one split per path.
  std::string split = "train";
  // Encoded images (folder, tfrecord) are fitted to this shape; sides of 0: the first image's.
  ImageShape shape{0, 0, 3};
  // 0: the largest label + 1 (npz, npy, tfrecord).
  int classes = 0;
  DatasetLimits limits;
};

// Opens `path` as `format` names it: an IDX directory, an .npz file, an .npy pair
// "IMAGES,LABELS", an image folder's root, a TFRecord file or a directory of them. Errors name
// the file and what is wrong in it.
StatusOr<std::unique_ptr<ImageDataset>> OpenDataset(DatasetFormat format, const std::string& path,
                                                    const OpenOptions& options);

}  // namespace tj::data
