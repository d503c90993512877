#include "trainer/data/numpy_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <utility>

#include "common/little_endian.h"
#include "trainer/data/file_reader.h"
#include "trainer/data/zip_reader.h"

namespace tj::data {
namespace {

constexpr size_t kMaxHeaderBytes = 65536;
constexpr int kMaxDims = 32;
constexpr int kMaxChannels = 16;
// An .npy's bytes beyond its array: the magic, version, header length and header.
constexpr uint64_t kMaxNpyOverhead = 12 + kMaxHeaderBytes;

struct TypeInfo {
  const char* code;
  NpyType type;
  size_t size;
};

constexpr TypeInfo kTypes[] = {
    {"u1", NpyType::kUint8, 1},   {"i1", NpyType::kInt8, 1},   {"u2", NpyType::kUint16, 2},
    {"i2", NpyType::kInt16, 2},   {"u4", NpyType::kUint32, 4}, {"i4", NpyType::kInt32, 4},
    {"u8", NpyType::kUint64, 8},  {"i8", NpyType::kInt64, 8},  {"f4", NpyType::kFloat32, 4},
    {"f8", NpyType::kFloat64, 8},
};

size_t ItemSize(NpyType type) {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) return t.size;
  }
  return 1;
}

// The header: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  Status Parse(std::string* descr, bool* fortran, std::vector<uint64_t>* shape) {
    bool have_descr = false;
    bool have_fortran = false;
    bool have_shape = false;
    if (!Consume('{')) return Error("does not start with '{'");
    while (!Consume('}')) {
      auto key = String();
      if (!key.ok()) return key.status();
      if (!Consume(':')) return Error("no ':' after key '" + *key + "'");
      if (*key == "descr") {
        Space();
        if (pos_ < text_.size() && text_[pos_] == '[') {
          return Error("a structured dtype (a list of fields) is not supported");
        }
        auto value = String();
        if (!value.ok()) return value.status();
        *descr = *value;
        have_descr = true;
      } else if (*key == "fortran_order") {
        auto value = Bool();
        if (!value.ok()) return value.status();
        *fortran = *value;
        have_fortran = true;
      } else if (*key == "shape") {
        TJ_RETURN_IF_ERROR(Tuple(shape));
        have_shape = true;
      } else {
        return Error("unknown key '" + *key + "'");
      }
      if (!Consume(',')) {
        if (!Consume('}')) return Error("expected ',' or '}' after key '" + *key + "'");
        break;
      }
    }
    if (!have_descr || !have_fortran || !have_shape) {
      return Error("lacks one of 'descr', 'fortran_order' and 'shape'");
    }
    return Status::Ok();
  }

 private:
  void Space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
  }
  bool Consume(char c) {
    Space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Status Error(const std::string& what) const {
    return Status::Error("malformed header at character " + std::to_string(pos_) + ": " + what);
  }
  StatusOr<std::string> String() {
    Space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return Error("expected a quoted string");
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return Error("an unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  StatusOr<bool> Bool() {
    Space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::string_view w(word);
      if (text_.substr(pos_, w.size()) == w) {
        pos_ += w.size();
        return value;
      }
    }
    return Error("expected True or False");
  }
  Status Tuple(std::vector<uint64_t>* out) {
    if (!Consume('(')) return Error("'shape' is not a tuple");
    while (!Consume(')')) {
      Space();
      uint64_t v = 0;
      size_t digits = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (++digits > 18) return Error("a dimension too large");
        v = v * 10 + static_cast<uint64_t>(text_[pos_++] - '0');
      }
      if (digits == 0) return Error("a dimension that is not a non-negative integer");
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2's long
      if (out->size() >= kMaxDims) return Error("more than 32 dimensions");
      out->push_back(v);
      if (!Consume(',')) {
        if (!Consume(')')) return Error("expected ',' or ')' in 'shape'");
        break;
      }
    }
    return Status::Ok();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian data on a little-endian host (x86-64, arm64)
  return v;
}

int64_t IntegerAt(const NpyArray& a, size_t i) {
  const uint8_t* p = a.data.data() + i * ItemSize(a.type);
  switch (a.type) {
    case NpyType::kUint8:
      return *p;
    case NpyType::kInt8:
      return static_cast<int8_t>(*p);
    case NpyType::kUint16:
      return Load<uint16_t>(p);
    case NpyType::kInt16:
      return Load<int16_t>(p);
    case NpyType::kUint32:
      return Load<uint32_t>(p);
    case NpyType::kInt32:
      return Load<int32_t>(p);
    case NpyType::kUint64: {
      const uint64_t v = Load<uint64_t>(p);
      return v > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v);
    }
    case NpyType::kInt64:
      return Load<int64_t>(p);
    default:
      return -1;
  }
}

struct Images {
  ImageShape shape;
  size_t count = 0;
  std::vector<uint8_t> pixels;
};

StatusOr<Images> ToImages(NpyArray a) {
  const std::string what = "images of dtype " + a.descr + " and shape " + ShapeText(a.shape);
  if (a.shape.size() != 3 && a.shape.size() != 4) {
    return Status::Error(what + ": expected N x H x W or N x H x W x C");
  }
  Images out;
  out.count = a.shape[0];
  const uint64_t channels = a.shape.size() == 4 ? a.shape[3] : 1;
  if (a.shape[1] < 1 || a.shape[2] < 1 || a.shape[1] > 65535 || a.shape[2] > 65535 ||
      channels < 1 || channels > kMaxChannels) {
    return Status::Error(what + ": height and width must be 1..65535 and channels 1..16");
  }
  out.shape = {static_cast<int>(a.shape[1]), static_cast<int>(a.shape[2]),
               static_cast<int>(channels)};
  if (a.type == NpyType::kUint8) {
    out.pixels = std::move(a.data);
    return out;
  }
  if (a.type != NpyType::kFloat32) {
    return Status::Error(what + ": only uint8 and float32 images are read");
  }
  const size_t n = a.data.size() / 4;
  float max = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = Load<float>(&a.data[4 * i]);
    if (!(v >= 0.0f && v <= 255.0f)) {  // NaN fails both
      return Status::Error(what + ": value " + std::to_string(v) + " at flat index " +
                           std::to_string(i) + " is outside [0, 255]");
    }
    max = std::max(max, v);
  }
  const float scale = max <= 1.0f ? 255.0f : 1.0f;
  out.pixels.resize(n);
  for (size_t i = 0; i < n; ++i) {
    out.pixels[i] = static_cast<uint8_t>(std::lround(Load<float>(&a.data[4 * i]) * scale));
  }
  return out;
}

StatusOr<std::unique_ptr<ImageDataset>> MakeDataset(const std::string& source, NpyArray images,
                                                    NpyArray labels, const NumpyOptions& options) {
  const std::string label_what =
      "labels of dtype " + labels.descr + " and shape " + ShapeText(labels.shape);
  auto pixels = ToImages(std::move(images));
  if (!pixels.ok()) return pixels.status().WithContext(source);
  if (labels.type == NpyType::kFloat32 || labels.type == NpyType::kFloat64) {
    return Status::Error(source + ": " + label_what + ": labels must be integers");
  }
  if (labels.shape.empty() || labels.shape.size() > 2 ||
      (labels.shape.size() == 2 && labels.shape[1] != 1)) {
    return Status::Error(source + ": " + label_what + ": expected N or N x 1");
  }
  if (labels.shape[0] != pixels->count) {
    return Status::Error(source + ": " + std::to_string(pixels->count) + " images but " +
                         std::to_string(labels.shape[0]) + " labels");
  }
  if (pixels->count > static_cast<uint64_t>(kMaxExamples)) {
    return Status::Error(source + ": more than " + std::to_string(kMaxExamples) + " examples");
  }
  std::vector<int32_t> values(pixels->count);
  int64_t max_label = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = IntegerAt(labels, i);
    if (v < 0 || v >= kMaxExamples || (options.classes > 0 && v >= options.classes)) {
      return Status::Error(
          source + ": label " + std::to_string(v) + " at index " + std::to_string(i) +
          " is not a class 0.." +
          std::to_string(options.classes > 0 ? options.classes - 1 : kMaxExamples - 1));
    }
    values[i] = static_cast<int32_t>(v);
    max_label = std::max(max_label, v);
  }
  const int classes = options.classes > 0 ? options.classes : static_cast<int>(max_label + 1);
  auto d = InMemoryDataset::Create(source, pixels->shape, classes, std::move(pixels->pixels),
                                   std::move(values));
  if (!d.ok()) return d.status();
  return std::unique_ptr<ImageDataset>(std::move(*d));
}

}  // namespace

StatusOr<NpyArray> ParseNpy(std::vector<uint8_t> bytes) {
  static constexpr char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0) {
    return Status::Error("not an .npy array (no \\x93NUMPY magic)");
  }
  const int major = bytes[6];
  const std::string_view b(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  size_t header_len = 0;
  size_t header_start = 0;
  if (major == 1) {
    header_len = LoadLittleEndian<uint16_t>(b, 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Status::Error("truncated in the header");
    header_len = LoadLittleEndian<uint32_t>(b, 8);
    header_start = 12;
  } else {
    return Status::Error("format version " + std::to_string(major) + "." +
                         std::to_string(bytes[7]) + " is not supported (1, 2 or 3)");
  }
  if (header_len > kMaxHeaderBytes) {
    return Status::Error("a header of " + std::to_string(header_len) +
                         " bytes, over the limit of " + std::to_string(kMaxHeaderBytes));
  }
  if (bytes.size() - header_start < header_len) {
    return Status::Error("truncated in the header (" + std::to_string(bytes.size()) + " bytes)");
  }
  NpyArray a;
  bool fortran = false;
  TJ_RETURN_IF_ERROR(
      HeaderParser(b.substr(header_start, header_len)).Parse(&a.descr, &fortran, &a.shape));
  if (fortran) return Status::Error("Fortran (column-major) order is not supported");
  if (a.descr.size() != 3 || (a.descr[0] != '<' && a.descr[0] != '|' && a.descr[0] != '=')) {
    return Status::Error("dtype '" + a.descr + "' is not supported" +
                         (a.descr.size() == 3 && a.descr[0] == '>'
                              ? " (big-endian; save it little-endian)"
                              : " (only little-endian integers, float32 and float64)"));
  }
  const TypeInfo* type = nullptr;
  for (const TypeInfo& t : kTypes) {
    if (a.descr.compare(1, 2, t.code) == 0) type = &t;
  }
  if (type == nullptr) return Status::Error("dtype '" + a.descr + "' is not supported");
  a.type = type->type;
  uint64_t count = 1;
  for (uint64_t d : a.shape) {
    if (__builtin_mul_overflow(count, d, &count)) {
      return Status::Error("shape " + ShapeText(a.shape) + " overflows");
    }
  }
  uint64_t data_bytes = 0;
  if (__builtin_mul_overflow(count, type->size, &data_bytes)) {
    return Status::Error("shape " + ShapeText(a.shape) + " overflows");
  }
  const uint64_t have = bytes.size() - header_start - header_len;
  if (have != data_bytes) {
    return Status::Error((have < data_bytes ? "truncated: " : "") + std::string("shape ") +
                         ShapeText(a.shape) + " of " + a.descr + " needs " +
                         std::to_string(data_bytes) + " bytes of data, the file has " +
                         std::to_string(have));
  }
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(header_start + header_len));
  a.data = std::move(bytes);
  return a;
}

StatusOr<std::unique_ptr<ImageDataset>> OpenNpzDataset(const std::string& path,
                                                       const std::string& split,
                                                       const NumpyOptions& options) {
  const std::string context = ".npz " + path;
  if (split != "train" && split != "test") {
    return Status::Error(context + ": split '" + split + "': train or test");
  }
  auto zip = ZipArchive::Open(path);
  if (!zip.ok()) return zip.status().WithContext(context);
  NpyArray arrays[2];
  const std::string keys[2] = {"x_" + split, "y_" + split};
  for (int i = 0; i < 2; ++i) {
    const std::string entry = keys[i] + ".npy";
    if (!zip->Has(entry)) {
      std::string names;
      for (const std::string& n : zip->names()) {
        if (names.size() > 200) {
          names += ", ...";
          break;
        }
        names += (names.empty() ? "" : ", ") + n;
      }
      return Status::Error(context + ": no array '" + keys[i] +
                           "' (expected x_train, y_train, x_test, y_test as keras.datasets; "
                           "it holds: " +
                           (names.empty() ? "nothing" : names) + ")");
    }
    auto bytes = zip->Read(entry, options.max_array_bytes + kMaxNpyOverhead);
    if (!bytes.ok()) return bytes.status().WithContext(context);
    auto array = ParseNpy(std::move(*bytes));
    if (!array.ok()) return array.status().WithContext(context + ": array " + keys[i]);
    arrays[i] = std::move(*array);
  }
  return MakeDataset(context + " (" + split + ")", std::move(arrays[0]), std::move(arrays[1]),
                     options);
}

StatusOr<std::unique_ptr<ImageDataset>> OpenNpyDataset(const std::string& images_path,
                                                       const std::string& labels_path,
                                                       const NumpyOptions& options) {
  NpyArray arrays[2];
  const std::string paths[2] = {images_path, labels_path};
  for (int i = 0; i < 2; ++i) {
    const std::string context = ".npy " + paths[i];
    auto bytes = ReadFileBounded(paths[i], options.max_array_bytes + kMaxNpyOverhead);
    if (!bytes.ok()) return bytes.status().WithContext(context);
    auto array = ParseNpy(std::move(*bytes));
    if (!array.ok()) return array.status().WithContext(context);
    arrays[i] = std::move(*array);
  }
  return MakeDataset(".npy " + images_path + " and " + labels_path, std::move(arrays[0]),
                     std::move(arrays[1]), options);
}

}  // namespace tj::data
