#include "trainer/data/image_encoder.h"

// As in image_decoder.cpp: the calls that may longjmp() run in small functions without C++
// objects of their own.
#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace tj::data {
namespace {

struct JpegEncoder {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr manager;
  jmp_buf jump;
  char error[JMSG_LENGTH_MAX];
  unsigned char* buffer;
  unsigned long size;
  bool created;
};

[[noreturn]] void EncoderErrorExit(j_common_ptr cinfo) {
  auto* e = static_cast<JpegEncoder*>(cinfo->client_data);
  (*cinfo->err->format_message)(cinfo, e->error);
  std::longjmp(e->jump, 1);
}

bool JpegCompress(JpegEncoder* e, const uint8_t* pixels, ImageShape shape, int quality) {
  if (setjmp(e->jump)) return false;
  jpeg_create_compress(&e->cinfo);
  e->created = true;
  jpeg_mem_dest(&e->cinfo, &e->buffer, &e->size);
  e->cinfo.image_width = static_cast<JDIMENSION>(shape.width);
  e->cinfo.image_height = static_cast<JDIMENSION>(shape.height);
  e->cinfo.input_components = shape.channels;
  e->cinfo.in_color_space = shape.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&e->cinfo);
  jpeg_set_quality(&e->cinfo, quality, TRUE);
  jpeg_start_compress(&e->cinfo, TRUE);
  const size_t row_bytes = static_cast<size_t>(shape.width) * shape.channels;
  while (e->cinfo.next_scanline < e->cinfo.image_height) {
    // libjpeg's rows are not const; it only reads them.
    JSAMPROW row = const_cast<uint8_t*>(pixels + e->cinfo.next_scanline * row_bytes);
    jpeg_write_scanlines(&e->cinfo, &row, 1);
  }
  jpeg_finish_compress(&e->cinfo);
  return true;
}

struct PngEncoder {
  png_structp png;
  png_infop info;
  std::string* out;
  char error[256];
};

[[noreturn]] void EncoderPngError(png_structp png, png_const_charp message) {
  auto* e = static_cast<PngEncoder*>(png_get_error_ptr(png));
  std::snprintf(e->error, sizeof e->error, "%s", message);
  png_longjmp(png, 1);
}

void EncoderPngWrite(png_structp png, png_bytep data, png_size_t length) {
  auto* e = static_cast<PngEncoder*>(png_get_io_ptr(png));
  e->out->append(reinterpret_cast<const char*>(data), length);
}

void EncoderPngFlush(png_structp /*png*/) {}

bool PngCompress(PngEncoder* e, png_bytepp rows, ImageShape shape) {
  if (setjmp(png_jmpbuf(e->png))) return false;
  png_set_write_fn(e->png, e, EncoderPngWrite, EncoderPngFlush);
  png_set_IHDR(e->png, e->info, static_cast<png_uint_32>(shape.width),
               static_cast<png_uint_32>(shape.height), 8,
               shape.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(e->png, e->info);
  png_write_image(e->png, rows);
  png_write_end(e->png, nullptr);
  return true;
}

Status CheckShape(std::span<const uint8_t> pixels, ImageShape shape) {
  if (shape.height < 1 || shape.width < 1 || (shape.channels != 1 && shape.channels != 3)) {
    return Status::Error("cannot encode an image of shape " + shape.ToString() +
                         " (1 or 3 channels)");
  }
  if (pixels.size() != shape.Size()) {
    return Status::Error("cannot encode " + std::to_string(pixels.size()) +
                         " bytes as an image of " + shape.ToString());
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::string> EncodeJpeg(std::span<const uint8_t> pixels, ImageShape shape, int quality) {
  TJ_RETURN_IF_ERROR(CheckShape(pixels, shape));
  auto encoder = std::make_unique<JpegEncoder>();
  JpegEncoder* e = encoder.get();
  std::memset(e, 0, sizeof *e);
  e->cinfo.err = jpeg_std_error(&e->manager);
  e->manager.error_exit = EncoderErrorExit;
  e->cinfo.client_data = e;  // kept by jpeg_create_compress
  const bool ok = JpegCompress(e, pixels.data(), shape, quality);
  std::string out;
  if (ok) out.assign(reinterpret_cast<const char*>(e->buffer), e->size);
  if (e->created) jpeg_destroy_compress(&e->cinfo);
  std::free(e->buffer);  // jpeg_mem_dest's buffer is malloc'ed
  if (!ok) return Status::Error(std::string("encoding a JPEG: ") + e->error);
  return out;
}

StatusOr<std::string> EncodePng(std::span<const uint8_t> pixels, ImageShape shape) {
  TJ_RETURN_IF_ERROR(CheckShape(pixels, shape));
  std::string out;
  auto encoder = std::make_unique<PngEncoder>();
  PngEncoder* e = encoder.get();
  std::memset(e, 0, sizeof *e);
  e->out = &out;
  e->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, e, EncoderPngError, nullptr);
  if (e->png == nullptr) return Status::Error("encoding a PNG: libpng could not start");
  e->info = png_create_info_struct(e->png);
  std::vector<png_bytep> rows(static_cast<size_t>(shape.height));
  const size_t row_bytes = static_cast<size_t>(shape.width) * shape.channels;
  for (size_t y = 0; y < rows.size(); ++y) {
    rows[y] = const_cast<uint8_t*>(pixels.data() + y * row_bytes);  // libpng only reads them
  }
  const bool ok = e->info != nullptr && PngCompress(e, rows.data(), shape);
  png_destroy_write_struct(&e->png, e->info ? &e->info : nullptr);
  if (!ok) return Status::Error(std::string("encoding a PNG: ") + e->error);
  return out;
}

}  // namespace tj::data
