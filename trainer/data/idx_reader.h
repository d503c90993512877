// Reads MNIST-format IDX files (https://yann.lecun.com/exdb/mnist/), gzipped or not, and
// loads a train/test split from a directory holding the four standard files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::data {

// One IDX file: unsigned bytes (type 0x08) with its dimensions.
struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> values;  // row-major, size = product of dims
};

// Reads `path` (gzip or raw, detected from the content). Errors name the file and what is
// wrong: missing, unreadable, not gzip/IDX, wrong magic, unsupported type, truncated, or
// trailing data.
StatusOr<IdxArray> ReadIdxFile(const std::string& path);

// Images as float32 in [0, 1] (value / 255), 28x28, with labels 0..9.
struct Split {
  int count = 0;
  std::vector<float> images;    // count x 784
  std::vector<uint8_t> labels;  // count
};

struct Dataset {
  Split train;
  Split test;
  std::string digest;  // SHA-256 over the four decoded arrays: identifies the dataset
};

inline constexpr int kImageSide = 28;
inline constexpr int kImagePixels = kImageSide * kImageSide;
inline constexpr int kNumClasses = 10;

// One split's four checked arrays, undecoded: count x 28 x 28 pixels and count labels 0..9.
struct IdxSplit {
  int count = 0;
  std::vector<uint8_t> images;
  std::vector<uint8_t> labels;
};

// Reads `dir`/`prefix`-{images-idx3,labels-idx1}-ubyte[.gz] (prefix "train" or "t10k") with
// LoadDataset's checks.
StatusOr<IdxSplit> ReadIdxSplit(const std::string& dir, const std::string& prefix);

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir`. Checks the shapes
// (N x 28 x 28 images, N labels, labels < 10) and that images and labels agree in count.
StatusOr<Dataset> LoadDataset(const std::string& dir);

}  // namespace tj::data
