// A dataset of tf.train.Example records in TFRecord files (tfrecord_reader.h), each holding an
// encoded JPEG or PNG and an int64 class label (tf_example.h's keys: image/encoded or image,
// image/class/label or label). Opening reads every file once: each record's framing and CRCs
// are verified and its Example parsed, and what is kept per example is where its image lies
// and its label (24 bytes), so the files are not held in memory. Images are read back with
// positioned reads and decoded when asked for, fitted to the configured shape as image
// folders' are.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data/dataset.h"
#include "trainer/data/image_decoder.h"

namespace tj::data {

struct TfRecordOptions {
  // The dataset's shape: channels 1 or 3; height and width 0: the first image's.
  ImageShape shape{0, 0, 3};
  // 0: the largest label + 1. Otherwise a label at or above it is refused when opening.
  int classes = 0;
  uint64_t max_record_bytes = uint64_t{64} << 20;
  DecodeLimits limits;
};

// `files` in the order their records become examples. The digest: SHA-256 over the shape, the
// class count and every file's bytes, in order.
StatusOr<std::unique_ptr<ImageDataset>> OpenTfRecordDataset(const std::vector<std::string>& files,
                                                            const TfRecordOptions& options);

// `path` itself when it is a file; when a directory, its regular files (names starting with
// '.' skipped) sorted by name. An error when there are none.
StatusOr<std::vector<std::string>> ListTfRecordFiles(const std::string& path);

}  // namespace tj::data
