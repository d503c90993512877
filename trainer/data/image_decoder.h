// JPEG (libjpeg-turbo) and PNG (libpng) bytes to uint8 pixels of a dataset's shape: the
// decoding behind the image-folder and TFRecord datasets. The bytes are untrusted (a tenant's
// volume): every size is checked before anything is allocated for it, and a file that the
// libraries refuse, or decode only with a warning (a truncated JPEG), is an error that says
// what is wrong, never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data/dataset.h"

namespace tj::data {

enum class ImageFormat { kUnknown, kJpeg, kPng };

// From the first bytes (JPEG: FF D8 FF; PNG: its 8-byte signature).
ImageFormat DetectImageFormat(std::span<const uint8_t> bytes);

// What a decoder may allocate: images of more pixels or a longer side are refused before
// being decoded.
struct DecodeLimits {
  int max_side = 32768;
  int64_t max_pixels = int64_t{64} << 20;  // 64 megapixels
};

// An image as decoded, at its own size.
struct DecodedImage {
  ImageShape shape;
  std::vector<uint8_t> pixels;  // shape.Size() bytes, row-major, channels last
};

// Decodes JPEG or PNG `bytes` at their own size to `channels` (1: grey, 3: RGB). Colour to
// grey: a JPEG's luma (libjpeg's own conversion), a PNG's ITU-R 601 luma
// (299 R + 587 G + 114 B) / 1000, rounded; grey to RGB repeats the grey. A PNG's alpha is
// dropped, its palette expanded, 16-bit samples scaled to 8. A JPEG is decoded at 1/2, 1/4 or
// 1/8 of its size (libjpeg's DCT scaling, far cheaper) when `min_height` x `min_width` still
// fits inside the smaller image; 0 for none.
StatusOr<DecodedImage> DecodeImage(std::span<const uint8_t> bytes, int channels,
                                   const DecodeLimits& limits, int min_height = 0,
                                   int min_width = 0);

// Fits `image` to `out_shape` (same channels): an image of that size is copied as is;
// otherwise it is scaled, keeping its aspect ratio, so that it just covers height x width
// (the shorter side, relative to the target, matches), with a triangle (bilinear) filter
// widened by the reduction factor when shrinking (antialiased, as PIL's BILINEAR), and the
// centre cut out. A side that needs no scaling is cropped with whole-pixel offsets
// ((size - target) / 2, rounded down). `out` holds out_shape.Size() bytes.
void FitImage(const DecodedImage& image, ImageShape out_shape, std::span<uint8_t> out);

// DecodeImage then FitImage into `out` (shape.Size() bytes), decoding a JPEG no larger than
// the fit needs.
Status DecodeAndFit(std::span<const uint8_t> bytes, ImageShape shape, const DecodeLimits& limits,
                    std::span<uint8_t> out);

}  // namespace tj::data
