#include "trainer/data/image_decoder.h"

// libjpeg and libpng report errors by longjmp() out of the failing call. Each call that may
// fail runs in a small function below that sets the jump target first and holds no C++ object
// of its own; the objects (buffers, the decoders' state) live in the callers, outside the
// frames a longjmp() leaves.
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

namespace tj::data {
namespace {

// Progressive JPEGs of thousands of tiny scans make a small file cost minutes of CPU
// (libjpeg-turbo's own tools cap scans the same way: djpeg -maxscan).
constexpr int kMaxJpegScans = 500;
// libpng's cap on the memory of one ancillary chunk (a compressed text or ICC profile).
constexpr png_alloc_size_t kMaxPngChunkBytes = 8 << 20;

std::string Dimensions(int64_t width, int64_t height) {
  return std::to_string(width) + "x" + std::to_string(height);
}

Status CheckSize(int64_t width, int64_t height, const DecodeLimits& limits) {
  if (width < 1 || height < 1) {
    return Status::Error("has no pixels (" + Dimensions(width, height) + ")");
  }
  if (width > limits.max_side || height > limits.max_side || width * height > limits.max_pixels) {
    return Status::Error("is " + Dimensions(width, height) + " pixels, over the limit of " +
                         std::to_string(limits.max_side) + " per side and " +
                         std::to_string(limits.max_pixels) + " in all");
  }
  return Status::Ok();
}

// ---- JPEG -------------------------------------------------------------------------------

struct JpegErrors {
  jpeg_error_mgr manager;  // first: libjpeg sees a jpeg_error_mgr*
  jmp_buf jump;
  char error[JMSG_LENGTH_MAX];
  char warning[JMSG_LENGTH_MAX];
  bool warned;
};

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->error);
  std::longjmp(errors->jump, 1);
}

// Warnings (level -1) are what libjpeg says of damaged data it decodes anyway (a truncated
// file, bad Huffman codes): the first is kept, and the image refused. Trace messages
// (level >= 0) are dropped.
void JpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (!errors->warned) (*cinfo->err->format_message)(cinfo, errors->warning);
  errors->warned = true;
  cinfo->err->num_warnings++;
}

void JpegProgress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxJpegScans) {
    auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
    std::snprintf(errors->error, sizeof errors->error, "more than %d progressive scans",
                  kMaxJpegScans);
    std::longjmp(errors->jump, 1);
  }
}

struct JpegState {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  jpeg_progress_mgr progress;
  bool created;
};

bool JpegReadHeader(JpegState* s, const uint8_t* data, size_t size) {
  if (setjmp(s->errors.jump)) return false;
  jpeg_create_decompress(&s->cinfo);
  s->created = true;
  s->progress.progress_monitor = JpegProgress;
  s->cinfo.progress = &s->progress;
  jpeg_mem_src(&s->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&s->cinfo, TRUE);
  return true;
}

bool JpegPrepare(JpegState* s) {
  if (setjmp(s->errors.jump)) return false;
  jpeg_calc_output_dimensions(&s->cinfo);
  return true;
}

bool JpegDecompress(JpegState* s, uint8_t* out, size_t row_bytes) {
  if (setjmp(s->errors.jump)) return false;
  jpeg_start_decompress(&s->cinfo);
  while (s->cinfo.output_scanline < s->cinfo.output_height) {
    JSAMPROW row = out + static_cast<size_t>(s->cinfo.output_scanline) * row_bytes;
    jpeg_read_scanlines(&s->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&s->cinfo);
  return true;
}

StatusOr<DecodedImage> DecodeJpeg(std::span<const uint8_t> bytes, int channels,
                                  const DecodeLimits& limits, int min_height, int min_width) {
  auto state = std::make_unique<JpegState>();
  JpegState* s = state.get();
  std::memset(s, 0, sizeof *s);
  s->cinfo.err = jpeg_std_error(&s->errors.manager);
  s->errors.manager.error_exit = JpegErrorExit;
  s->errors.manager.emit_message = JpegEmitMessage;
  struct Destroy {
    JpegState* s;
    ~Destroy() {
      if (s->created) jpeg_destroy_decompress(&s->cinfo);
    }
  } destroy{s};

  auto failed = [&] { return Status::Error(std::string("not a valid JPEG: ") + s->errors.error); };
  if (bytes.size() > 0xffffffffu) return Status::Error("is over 4 GiB, too large for a JPEG");
  if (!JpegReadHeader(s, bytes.data(), bytes.size())) return failed();
  const int64_t width = s->cinfo.image_width;
  const int64_t height = s->cinfo.image_height;
  if (Status st = CheckSize(width, height, limits); !st.ok()) {
    return Status::Error("a JPEG that " + st.message());
  }
  if (s->cinfo.jpeg_color_space == JCS_CMYK || s->cinfo.jpeg_color_space == JCS_YCCK) {
    return Status::Error("a CMYK JPEG: only greyscale and colour (YCbCr, RGB) are supported");
  }
  s->cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  s->cinfo.scale_num = 1;
  s->cinfo.scale_denom = 1;
  if (min_height > 0 && min_width > 0) {
    for (unsigned denom : {8u, 4u, 2u}) {
      if ((height + denom - 1) / denom >= min_height && (width + denom - 1) / denom >= min_width) {
        s->cinfo.scale_denom = denom;
        break;
      }
    }
  }
  if (!JpegPrepare(s)) return failed();
  DecodedImage image;
  image.shape = {static_cast<int>(s->cinfo.output_height), static_cast<int>(s->cinfo.output_width),
                 s->cinfo.output_components};
  if (image.shape.channels != channels) {
    return Status::Error("a JPEG libjpeg decodes to " + std::to_string(image.shape.channels) +
                         " channels, not " + std::to_string(channels));
  }
  image.pixels.resize(image.shape.Size());
  if (!JpegDecompress(s, image.pixels.data(),
                      static_cast<size_t>(image.shape.width) * image.shape.channels)) {
    return failed();
  }
  if (s->errors.warned) {
    return Status::Error(std::string("corrupt JPEG data: ") + s->errors.warning);
  }
  return image;
}

// ---- PNG --------------------------------------------------------------------------------

struct PngState {
  png_structp png;
  png_infop info;
  const uint8_t* data;
  size_t size;
  size_t offset;
  char error[256];
};

[[noreturn]] void PngError(png_structp png, png_const_charp message) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(s->error, sizeof s->error, "%s", message);
  png_longjmp(png, 1);
}

// libpng's warnings are about ancillary chunks (an ICC profile it does not like): the pixels
// are sound, so they are ignored.
void PngWarning(png_structp /*png*/, png_const_charp /*message*/) {}

void PngRead(png_structp png, png_bytep out, png_size_t length) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (length > s->size - s->offset) png_error(png, "truncated: the file ends inside the image");
  std::memcpy(out, s->data + s->offset, length);
  s->offset += length;
}

bool PngReadHeader(PngState* s, const DecodeLimits* limits) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  png_set_read_fn(s->png, s, PngRead);
  png_set_user_limits(s->png, static_cast<png_uint_32>(limits->max_side),
                      static_cast<png_uint_32>(limits->max_side));
  png_set_chunk_malloc_max(s->png, kMaxPngChunkBytes);
  png_read_info(s->png, s->info);
  return true;
}

// 8-bit grey or RGB, whatever the file holds: palettes expanded, alpha dropped, 16-bit samples
// scaled (rounded) to 8.
bool PngSetTransforms(PngState* s) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  const int color_type = png_get_color_type(s->png, s->info);
  const int bit_depth = png_get_bit_depth(s->png, s->info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s->png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(s->png);
  if (bit_depth == 16) png_set_scale_16(s->png);
  if ((color_type & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(s->png);
  png_set_interlace_handling(s->png);
  png_read_update_info(s->png, s->info);
  return true;
}

bool PngReadImage(PngState* s, png_bytepp rows) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  png_read_image(s->png, rows);
  return true;
}

StatusOr<DecodedImage> DecodePng(std::span<const uint8_t> bytes, int channels,
                                 const DecodeLimits& limits) {
  auto state = std::make_unique<PngState>();
  PngState* s = state.get();
  std::memset(s, 0, sizeof *s);
  s->data = bytes.data();
  s->size = bytes.size();
  s->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, s, PngError, PngWarning);
  if (s->png == nullptr) return Status::Error("libpng could not start (out of memory)");
  s->info = png_create_info_struct(s->png);
  struct Destroy {
    PngState* s;
    ~Destroy() { png_destroy_read_struct(&s->png, s->info ? &s->info : nullptr, nullptr); }
  } destroy{s};
  if (s->info == nullptr) return Status::Error("libpng could not start (out of memory)");

  auto failed = [&] { return Status::Error(std::string("not a valid PNG: ") + s->error); };
  if (!PngReadHeader(s, &limits)) return failed();
  const int64_t width = png_get_image_width(s->png, s->info);
  const int64_t height = png_get_image_height(s->png, s->info);
  if (Status st = CheckSize(width, height, limits); !st.ok()) {
    return Status::Error("a PNG that " + st.message());
  }
  if (!PngSetTransforms(s)) return failed();
  const int decoded_channels = png_get_channels(s->png, s->info);
  const size_t row_bytes = png_get_rowbytes(s->png, s->info);
  if ((decoded_channels != 1 && decoded_channels != 3) ||
      row_bytes != static_cast<size_t>(width) * decoded_channels) {
    return Status::Error("a PNG libpng decodes to " + std::to_string(decoded_channels) +
                         " channels of " + std::to_string(row_bytes) + " bytes a row");
  }
  std::vector<uint8_t> pixels(row_bytes * static_cast<size_t>(height));
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = pixels.data() + y * row_bytes;
  if (!PngReadImage(s, rows.data())) return failed();

  DecodedImage image;
  image.shape = {static_cast<int>(height), static_cast<int>(width), channels};
  const size_t count = static_cast<size_t>(width) * static_cast<size_t>(height);
  if (decoded_channels == channels) {
    image.pixels = std::move(pixels);
  } else if (channels == 3) {  // grey to RGB
    image.pixels.resize(count * 3);
    for (size_t i = 0; i < count; ++i) {
      std::memset(&image.pixels[3 * i], pixels[i], 3);
    }
  } else {  // RGB to grey: ITU-R 601 luma
    image.pixels.resize(count);
    for (size_t i = 0; i < count; ++i) {
      const uint32_t luma =
          299u * pixels[3 * i] + 587u * pixels[3 * i + 1] + 114u * pixels[3 * i + 2] + 500u;
      image.pixels[i] = static_cast<uint8_t>(luma / 1000u);
    }
  }
  return image;
}

// ---- Fitting ------------------------------------------------------------------------------

// For each output position along one axis, the source positions it reads and their weights.
struct AxisFilter {
  std::vector<int> first;  // first source index of each output
  std::vector<int> taps;   // how many
  std::vector<float> weights;
  int max_taps = 0;
};

// Output o's centre in source coordinates: offset + (o + 0.5) / scale, where offset cuts the
// centre of the source's scaled extent; a triangle of radius max(1 / scale, 1) around it.
AxisFilter MakeAxisFilter(int source, int output, double scale) {
  AxisFilter f;
  const double step = 1.0 / scale;
  const double offset = (source - output * step) / 2.0;
  const double radius = std::max(step, 1.0);
  f.max_taps = static_cast<int>(std::ceil(radius)) * 2 + 1;
  f.first.resize(static_cast<size_t>(output));
  f.taps.resize(static_cast<size_t>(output));
  f.weights.assign(static_cast<size_t>(output) * f.max_taps, 0.0f);
  for (int o = 0; o < output; ++o) {
    const double centre = offset + (o + 0.5) * step;
    int lo = static_cast<int>(std::floor(centre - radius));
    int hi = static_cast<int>(std::ceil(centre + radius));
    lo = std::max(lo, 0);
    hi = std::min(hi, source);
    if (hi - lo > f.max_taps) hi = lo + f.max_taps;
    double total = 0;
    float* w = &f.weights[static_cast<size_t>(o) * f.max_taps];
    for (int j = lo; j < hi; ++j) {
      const double d = std::abs(j + 0.5 - centre) / radius;
      const double v = d < 1.0 ? 1.0 - d : 0.0;
      w[j - lo] = static_cast<float>(v);
      total += v;
    }
    if (total <= 0) {  // cannot happen for a centre inside the image; nearest as a fallback
      lo = std::clamp(static_cast<int>(centre), 0, source - 1);
      hi = lo + 1;
      w[0] = 1.0f;
      total = 1.0;
    }
    for (int j = 0; j < hi - lo; ++j) w[j] = static_cast<float>(w[j] / total);
    f.first[static_cast<size_t>(o)] = lo;
    f.taps[static_cast<size_t>(o)] = hi - lo;
  }
  return f;
}

uint8_t ToByte(float v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

}  // namespace

ImageFormat DetectImageFormat(std::span<const uint8_t> bytes) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) {
    return ImageFormat::kJpeg;
  }
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

StatusOr<DecodedImage> DecodeImage(std::span<const uint8_t> bytes, int channels,
                                   const DecodeLimits& limits, int min_height, int min_width) {
  if (channels != 1 && channels != 3) {
    return Status::Error("cannot decode to " + std::to_string(channels) +
                         " channels (1: grey, 3: RGB)");
  }
  switch (DetectImageFormat(bytes)) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(bytes, channels, limits, min_height, min_width);
    case ImageFormat::kPng:
      return DecodePng(bytes, channels, limits);
    case ImageFormat::kUnknown:
      break;
  }
  std::string start;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 4); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02x", bytes[i]);
    start += (i ? " " : "") + std::string(hex);
  }
  return Status::Error("neither JPEG nor PNG (" + std::to_string(bytes.size()) + " bytes" +
                       (start.empty() ? "" : ", starting " + start) + ")");
}

void FitImage(const DecodedImage& image, ImageShape out_shape, std::span<uint8_t> out) {
  const ImageShape in = image.shape;
  const int c = in.channels;
  if (in == out_shape) {
    std::copy(image.pixels.begin(), image.pixels.end(), out.begin());
    return;
  }
  const double scale = std::max(static_cast<double>(out_shape.height) / in.height,
                                static_cast<double>(out_shape.width) / in.width);
  if (scale == 1.0) {  // one side fits exactly, the other is longer: a whole-pixel crop
    const int oy = (in.height - out_shape.height) / 2;
    const int ox = (in.width - out_shape.width) / 2;
    const size_t row = static_cast<size_t>(out_shape.width) * c;
    for (int y = 0; y < out_shape.height; ++y) {
      const uint8_t* src =
          &image.pixels[(static_cast<size_t>(y + oy) * in.width + static_cast<size_t>(ox)) * c];
      std::copy(src, src + row, &out[static_cast<size_t>(y) * row]);
    }
    return;
  }
  const AxisFilter fx = MakeAxisFilter(in.width, out_shape.width, scale);
  const AxisFilter fy = MakeAxisFilter(in.height, out_shape.height, scale);
  // Horizontal pass over the source rows the vertical pass reads.
  const int row_lo = fy.first.front();
  const int row_hi = fy.first.back() + fy.taps.back();
  const size_t out_row = static_cast<size_t>(out_shape.width) * c;
  std::vector<float> horizontal(static_cast<size_t>(row_hi - row_lo) * out_row);
  for (int y = row_lo; y < row_hi; ++y) {
    const uint8_t* src = &image.pixels[static_cast<size_t>(y) * in.width * c];
    float* dst = &horizontal[static_cast<size_t>(y - row_lo) * out_row];
    for (int x = 0; x < out_shape.width; ++x) {
      const float* w = &fx.weights[static_cast<size_t>(x) * fx.max_taps];
      const int first = fx.first[static_cast<size_t>(x)];
      for (int k = 0; k < c; ++k) {
        float sum = 0;
        for (int t = 0; t < fx.taps[static_cast<size_t>(x)]; ++t) {
          sum += w[t] * static_cast<float>(src[static_cast<size_t>(first + t) * c + k]);
        }
        dst[static_cast<size_t>(x) * c + k] = sum;
      }
    }
  }
  for (int y = 0; y < out_shape.height; ++y) {
    const float* w = &fy.weights[static_cast<size_t>(y) * fy.max_taps];
    const int first = fy.first[static_cast<size_t>(y)] - row_lo;
    uint8_t* dst = &out[static_cast<size_t>(y) * out_row];
    for (size_t i = 0; i < out_row; ++i) {
      float sum = 0;
      for (int t = 0; t < fy.taps[static_cast<size_t>(y)]; ++t) {
        sum += w[t] * horizontal[static_cast<size_t>(first + t) * out_row + i];
      }
      dst[i] = ToByte(sum);
    }
  }
}

Status DecodeAndFit(std::span<const uint8_t> bytes, ImageShape shape, const DecodeLimits& limits,
                    std::span<uint8_t> out) {
  auto image = DecodeImage(bytes, shape.channels, limits, shape.height, shape.width);
  if (!image.ok()) return image.status();
  FitImage(*image, shape, out);
  return Status::Ok();
}

}  // namespace tj::data
