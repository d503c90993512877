// The image and the label of a tf.train.Example, read from its protobuf wire format without
// protobuf: a small reader for the few messages involved (Example > Features > map<string,
// Feature> > BytesList / Int64List), every length checked against what is left, unknown
// fields skipped, groups and malformed varints refused. The encoding it reads:
// https://protobuf.dev/programming-guides/encoding/ and tensorflow/core/example/feature.proto.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::data {

// The feature keys looked for, first match wins: TensorFlow's image models' keys, then the
// short ones of TensorFlow Datasets.
inline constexpr const char* kImageKeys[] = {"image/encoded", "image"};
inline constexpr const char* kLabelKeys[] = {"image/class/label", "label"};

struct ImageExample {
  size_t image_offset = 0;  // where the encoded image starts in the record
  size_t image_size = 0;
  int64_t label = 0;
};

// The first value of the image feature (a bytes_list) and of the label feature (an
// int64_list, packed or not). Errors say what is wrong: malformed wire format (with the
// offset), no image or label feature (naming the keys the example has), a feature of the wrong
// kind or without values, a negative label.
StatusOr<ImageExample> ParseImageExample(std::span<const uint8_t> record);

// A tf.train.Example holding `image` under `image_key` and `label` under `label_key` (for
// tests and tools; field order as TensorFlow writes it).
std::string SerializeImageExample(std::span<const uint8_t> image, int64_t label,
                                  const std::string& image_key = "image/encoded",
                                  const std::string& label_key = "image/class/label");

}  // namespace tj::data
