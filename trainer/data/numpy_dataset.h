// NumPy arrays as a dataset: an .npz as keras.datasets' loaders return them (x_train, y_train,
// x_test, y_test; numpy.savez or savez_compressed), or a pair of .npy files. The format:
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html (versions 1 to 3;
// little-endian, C order).
//
//   images  uint8 or float32, N x H x W (one channel) or N x H x W x C (C 1..16).
//           float32 values are converted to uint8: when every value lies in [0, 1] they are
//           taken as fractions of 255 (round(v x 255)), otherwise as 0..255 (round(v)); NaN,
//           infinities and values outside [0, 255] are refused, naming the first.
//   labels  any integer type, N or N x 1, each in [0, classes).
//
// The arrays are held in memory, decoded; the digest is DigestOfImages (dataset.h) of them, so
// the same pixels and labels give the same digest as from any other format.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data/dataset.h"

namespace tj::data {

enum class NpyType {
  kUint8,
  kInt8,
  kUint16,
  kInt16,
  kUint32,
  kInt32,
  kUint64,
  kInt64,
  kFloat32,
  kFloat64
};

// One array, its header parsed and removed.
struct NpyArray {
  NpyType type = NpyType::kUint8;
  std::string descr;  // as the header wrote it: "|u1", "<f4", ...
  std::vector<uint64_t> shape;
  std::vector<uint8_t> data;  // product(shape) x item size bytes, little-endian
};

// Parses an .npy file's bytes (taking them, to drop the header in place). Errors say what is
// wrong: magic, version, header (not a dict, missing key, unknown or big-endian dtype, Fortran
// order), a data size that does not match the shape.
StatusOr<NpyArray> ParseNpy(std::vector<uint8_t> bytes);

struct NumpyOptions {
  // 0: the largest label + 1.
  int classes = 0;
  // No array may hold more bytes than this (the file's declared size is checked first).
  uint64_t max_array_bytes = uint64_t{4} << 30;
};

// x_<split> and y_<split> of an .npz (split "train" or "test").
StatusOr<std::unique_ptr<ImageDataset>> OpenNpzDataset(const std::string& path,
                                                       const std::string& split,
                                                       const NumpyOptions& options);

// An images .npy and a labels .npy.
StatusOr<std::unique_ptr<ImageDataset>> OpenNpyDataset(const std::string& images_path,
                                                       const std::string& labels_path,
                                                       const NumpyOptions& options);

}  // namespace tj::data
