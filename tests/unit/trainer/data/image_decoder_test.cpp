// JPEG and PNG decoding and fitting, on images encoded here with the same libraries, and every
// refusal of a damaged or oversized file.
#include "trainer/data/image_decoder.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/unit/trainer/data/dataset_files.h"
#include "trainer/data/image_encoder.h"

namespace tj::data {
namespace {

using testing::PatternImage;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(ImageDecoderTest, PngRoundTripsExactlyInGreyAndColour) {
  for (int channels : {1, 3}) {
    const ImageShape shape{13, 17, channels};
    const auto pixels = PatternImage(shape, 1);
    auto png = EncodePng(pixels, shape);
    ASSERT_TRUE(png.ok()) << png.status().message();
    EXPECT_EQ(DetectImageFormat(Bytes(*png)), ImageFormat::kPng);
    auto image = DecodeImage(Bytes(*png), channels, DecodeLimits{});
    ASSERT_TRUE(image.ok()) << image.status().message();
    EXPECT_EQ(image->shape, shape);
    EXPECT_EQ(image->pixels, pixels);
  }
}

TEST(ImageDecoderTest, JpegDecodesCloseToWhatWasEncoded) {
  const ImageShape shape{32, 32, 3};
  const auto pixels = PatternImage(shape, 2);
  auto jpeg = EncodeJpeg(pixels, shape, 95);
  ASSERT_TRUE(jpeg.ok()) << jpeg.status().message();
  EXPECT_EQ(DetectImageFormat(Bytes(*jpeg)), ImageFormat::kJpeg);
  auto image = DecodeImage(Bytes(*jpeg), 3, DecodeLimits{});
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(image->shape, shape);
  double total = 0;
  for (size_t i = 0; i < pixels.size(); ++i) total += std::abs(int{pixels[i]} - image->pixels[i]);
  EXPECT_LT(total / static_cast<double>(pixels.size()), 6.0);
}

TEST(ImageDecoderTest, ConvertsBetweenGreyAndColour) {
  const ImageShape rgb{4, 4, 3};
  std::vector<uint8_t> pixels(rgb.Size());
  for (size_t i = 0; i < pixels.size(); i += 3) {
    pixels[i] = 200;
    pixels[i + 1] = 100;
    pixels[i + 2] = 50;
  }
  auto png = EncodePng(pixels, rgb);
  ASSERT_TRUE(png.ok());
  auto grey = DecodeImage(Bytes(*png), 1, DecodeLimits{});
  ASSERT_TRUE(grey.ok()) << grey.status().message();
  EXPECT_EQ(grey->shape, (ImageShape{4, 4, 1}));
  // (299 x 200 + 587 x 100 + 114 x 50 + 500) / 1000 = 124
  EXPECT_EQ(grey->pixels, std::vector<uint8_t>(16, 124));

  const ImageShape g{2, 2, 1};
  auto grey_png = EncodePng(std::vector<uint8_t>{10, 20, 30, 40}, g);
  ASSERT_TRUE(grey_png.ok());
  auto colour = DecodeImage(Bytes(*grey_png), 3, DecodeLimits{});
  ASSERT_TRUE(colour.ok());
  EXPECT_EQ(colour->pixels, (std::vector<uint8_t>{10, 10, 10, 20, 20, 20, 30, 30, 30, 40, 40, 40}));
}

TEST(ImageDecoderTest, FitCopiesCropsAndScales) {
  // Same size: a copy.
  DecodedImage same{{4, 4, 1}, PatternImage({4, 4, 1}, 3)};
  std::vector<uint8_t> out(16);
  FitImage(same, {4, 4, 1}, out);
  EXPECT_EQ(out, same.pixels);

  // One side fits, the other is longer: a whole-pixel centre crop.
  DecodedImage wide{{2, 6, 1}, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}};
  out.assign(4, 0);
  FitImage(wide, {2, 2, 1}, out);
  EXPECT_EQ(out, (std::vector<uint8_t>{2, 3, 12, 13}));

  // Halving a constant image keeps it constant (each output's weights sum to 1).
  DecodedImage flat{{8, 8, 3}, std::vector<uint8_t>(8 * 8 * 3, 77)};
  out.assign(4 * 4 * 3, 0);
  FitImage(flat, {4, 4, 3}, out);
  EXPECT_EQ(out, std::vector<uint8_t>(4 * 4 * 3, 77));

  // A left half black, right half white image halved keeps its halves.
  DecodedImage halves{{8, 8, 1}, std::vector<uint8_t>(64)};
  for (int y = 0; y < 8; ++y) {
    for (int x = 4; x < 8; ++x) halves.pixels[y * 8 + x] = 255;
  }
  out.assign(16, 0);
  FitImage(halves, {4, 4, 1}, out);
  for (int y = 0; y < 4; ++y) {
    EXPECT_EQ(out[y * 4 + 0], 0);
    EXPECT_EQ(out[y * 4 + 3], 255);
    EXPECT_LT(out[y * 4 + 1], 64);
    EXPECT_GT(out[y * 4 + 2], 191);
  }

  // Wider than tall, scaled and cropped: 4 x 16 to 2 x 2 keeps the middle (scale 1/2: the
  // middle 4 of 16 columns, which the filter's reach of 2 extends to columns 5..10).
  DecodedImage stripes{{4, 16, 1}, std::vector<uint8_t>(64)};
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 16; ++x) stripes.pixels[y * 16 + x] = x < 4 || x >= 12 ? 0 : 200;
  }
  out.assign(4, 0);
  FitImage(stripes, {2, 2, 1}, out);
  EXPECT_EQ(out, std::vector<uint8_t>(4, 200));
}

TEST(ImageDecoderTest, DecodeAndFitUsesJpegScalingAndReachesTheShape) {
  const ImageShape big{256, 192, 3};
  auto jpeg = EncodeJpeg(PatternImage(big, 4), big, 90);
  ASSERT_TRUE(jpeg.ok());
  // Decoded at 1/4 (64 x 48 still covers 40 x 40), then fitted.
  auto scaled = DecodeImage(Bytes(*jpeg), 3, DecodeLimits{}, 40, 40);
  ASSERT_TRUE(scaled.ok());
  EXPECT_EQ(scaled->shape, (ImageShape{64, 48, 3}));
  std::vector<uint8_t> out(40 * 40 * 3);
  ASSERT_TRUE(DecodeAndFit(Bytes(*jpeg), {40, 40, 3}, DecodeLimits{}, out).ok());
  // Against a full decode fitted the same way: close.
  auto full = DecodeImage(Bytes(*jpeg), 3, DecodeLimits{});
  ASSERT_TRUE(full.ok());
  std::vector<uint8_t> reference(out.size());
  FitImage(*full, {40, 40, 3}, reference);
  double total = 0;
  for (size_t i = 0; i < out.size(); ++i) total += std::abs(int{out[i]} - reference[i]);
  EXPECT_LT(total / static_cast<double>(out.size()), 8.0);
}

TEST(ImageDecoderTest, RefusesDamagedAndOversizedImages) {
  const ImageShape shape{24, 24, 3};
  const auto pixels = PatternImage(shape, 5);
  const std::string jpeg = *EncodeJpeg(pixels, shape);
  const std::string png = *EncodePng(pixels, shape);
  struct Case {
    std::string name;
    std::string bytes;
    std::string expected;
    DecodeLimits limits;
  };
  std::string png_bad_crc = png;
  png_bad_crc[png.find("IDAT") + 10] ^= 0x55;  // inside IDAT's data: its CRC no longer holds
  std::string jpeg_garbled = jpeg;             // an end-of-image marker inside the scan's data
  jpeg_garbled[jpeg.size() - 40] = '\xff';
  jpeg_garbled[jpeg.size() - 39] = '\xd9';
  const std::vector<Case> cases = {
      {"empty", "", "neither JPEG nor PNG (0 bytes)", {}},
      {"text", "hello, world", "neither JPEG nor PNG (12 bytes, starting 68 65 6c 6c)", {}},
      {"truncated jpeg", jpeg.substr(0, jpeg.size() - 30), "corrupt JPEG data", {}},
      {"jpeg header only", jpeg.substr(0, 20), "not a valid JPEG", {}},
      {"garbled jpeg", jpeg_garbled, "corrupt JPEG data", {}},
      {"truncated png", png.substr(0, png.size() / 2), "not a valid PNG", {}},
      {"png signature only", png.substr(0, 8), "not a valid PNG", {}},
      {"png bad crc", png_bad_crc, "not a valid PNG", {}},
      {"jpeg too large", jpeg, "24x24 pixels, over the limit of 16 per side", {16, 1 << 20}},
      {"png too many pixels", png, "over the limit", {1000, 500}},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> out(shape.Size());
    Status s = DecodeAndFit(Bytes(c.bytes), shape, c.limits, out);
    ASSERT_FALSE(s.ok()) << c.name;
    EXPECT_NE(s.message().find(c.expected), std::string::npos) << c.name << ": " << s.message();
  }
}

TEST(ImageDecoderTest, RefusesChannelCountsItCannotProduce) {
  auto r = DecodeImage({}, 4, DecodeLimits{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("4 channels"), std::string::npos);
}

}  // namespace
}  // namespace tj::data
