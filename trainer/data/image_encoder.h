// uint8 pixels to JPEG (libjpeg-turbo) or PNG (libpng) bytes: the files the dataset tests and
// the decode benchmark write, with the libraries the readers decode them with.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "trainer/data/dataset.h"

namespace tj::data {

// `pixels`: shape.Size() bytes, row-major, channels last; 1 (grey) or 3 (RGB) channels.
// `quality` 1..100; 4:2:0 chroma subsampling for colour, as libjpeg's default.
StatusOr<std::string> EncodeJpeg(std::span<const uint8_t> pixels, ImageShape shape,
                                 int quality = 90);
// 8-bit grey or RGB, not interlaced.
StatusOr<std::string> EncodePng(std::span<const uint8_t> pixels, ImageShape shape);

}  // namespace tj::data
