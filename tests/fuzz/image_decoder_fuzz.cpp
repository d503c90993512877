// Fuzz target: the JPEG and PNG decoder (trainer/data/image_decoder.h) behind the image-folder
// and TFRecord datasets, on libjpeg-turbo and libpng. The first input byte picks the channels
// (bit 0: 3, else 1); the rest is the file. Limits of 512 pixels a side and 2^18 in all keep
// each input fast. Any bytes must decode or give an error, never a crash; a decoded image must
// be within the limits and hold exactly its shape's bytes, and fit into 8 x 8.
#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "trainer/data/image_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int channels = (data[0] & 1) != 0 ? 3 : 1;
  tj::data::DecodeLimits limits;
  limits.max_side = 512;
  limits.max_pixels = 1 << 18;
  const std::span<const uint8_t> bytes(data + 1, size - 1);
  auto image = tj::data::DecodeImage(bytes, channels, limits);
  if (!image.ok()) {
    TJ_FUZZ_CHECK(!image.status().message().empty());
    return 0;
  }
  TJ_FUZZ_CHECK(image->shape.channels == channels);
  TJ_FUZZ_CHECK(image->shape.height >= 1 && image->shape.height <= limits.max_side);
  TJ_FUZZ_CHECK(image->shape.width >= 1 && image->shape.width <= limits.max_side);
  TJ_FUZZ_CHECK(image->pixels.size() == image->shape.Size());
  std::vector<uint8_t> out(8 * 8 * static_cast<size_t>(channels));
  TJ_FUZZ_CHECK(tj::data::DecodeAndFit(bytes, {8, 8, channels}, limits, out).ok());
  return 0;
}
