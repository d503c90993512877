#include "trainer/data/idx_reader.h"

#include <zlib.h>

#include <filesystem>
#include <memory>
#include <string_view>

#include "common/big_endian.h"
#include "common/sha256.h"

namespace tj::data {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads the whole (possibly gzipped) file. zlib reads uncompressed files transparently.
StatusOr<std::vector<uint8_t>> ReadAll(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Status::Error("file not found");
  }
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) return Status::Error("cannot open file");
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    int n = gzread(f.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(f.get(), &errnum);
      return Status::Error(std::string("corrupt gzip data (") + msg + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  // zlib reports a gzip stream cut short only through gzerror after EOF.
  int errnum = 0;
  const char* msg = gzerror(f.get(), &errnum);
  if (errnum != Z_OK && errnum != Z_STREAM_END) {
    return Status::Error(std::string("corrupt or truncated gzip data (") + msg + ")");
  }
  return out;
}

}  // namespace

StatusOr<IdxArray> ReadIdxFile(const std::string& path) {
  auto context = "reading IDX file " + path;
  auto bytes = ReadAll(path);
  if (!bytes.ok()) return bytes.status().WithContext(context);
  const std::vector<uint8_t>& b = *bytes;
  if (b.size() < 4) {
    return Status::Error(context + ": truncated: " + std::to_string(b.size()) +
                         " bytes, too short for the 4-byte IDX magic");
  }
  if (b[0] != 0 || b[1] != 0) {
    return Status::Error(context +
                         ": not an IDX file (the magic number must start with two zero "
                         "bytes); expected MNIST-format files such as train-images-idx3-ubyte.gz");
  }
  if (b[2] != 0x08) {
    return Status::Error(context + ": unsupported element type 0x" + ToHex({&b[2], 1}) +
                         " (only unsigned bytes, 0x08, are supported)");
  }
  int ndims = b[3];
  if (ndims < 1 || ndims > 4) {
    return Status::Error(context + ": unsupported number of dimensions " + std::to_string(ndims));
  }
  size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (b.size() < header) {
    return Status::Error(context + ": truncated in the header (" + std::to_string(b.size()) +
                         " bytes, the header needs " + std::to_string(header) + ")");
  }
  IdxArray out;
  // Four 32-bit dimensions can multiply past 64 bits: a wrapped product could match the
  // file's size and let a header announce far more values than are there.
  uint64_t total = 1;
  bool overflow = false;
  bool has_zero = false;
  const std::string_view dims(reinterpret_cast<const char*>(b.data()) + 4, header - 4);
  for (int i = 0; i < ndims; ++i) {
    out.dims.push_back(LoadBigEndian<uint32_t>(dims, 4 * static_cast<size_t>(i)));
    has_zero = has_zero || out.dims.back() == 0;
    overflow = __builtin_mul_overflow(total, uint64_t{out.dims.back()}, &total) || overflow;
  }
  if (overflow && !has_zero) {  // with a zero dimension the (wrapped) product is still 0
    return Status::Error(context +
                         ": truncated: the header announces more than 2^64 values "
                         "but the file holds " +
                         std::to_string(b.size() - header));
  }
  if (b.size() - header < total) {
    return Status::Error(context + ": truncated: the header announces " + std::to_string(total) +
                         " values but the file holds " + std::to_string(b.size() - header));
  }
  if (b.size() - header > total) {
    return Status::Error(context + ": " + std::to_string(b.size() - header - total) +
                         " unexpected bytes after the " + std::to_string(total) +
                         " announced values");
  }
  out.values.assign(b.begin() + static_cast<long>(header), b.end());
  return out;
}

namespace {

// Finds `<dir>/<stem>.gz` or `<dir>/<stem>`.
std::string FindFile(const std::string& dir, const std::string& stem) {
  std::error_code ec;
  for (const std::string& name : {stem + ".gz", stem}) {
    auto p = std::filesystem::path(dir) / name;
    if (std::filesystem::exists(p, ec)) return p.string();
  }
  return (std::filesystem::path(dir) / (stem + ".gz")).string();
}

StatusOr<Split> LoadSplit(const std::string& dir, const std::string& prefix, Sha256& digest) {
  auto raw = ReadIdxSplit(dir, prefix);
  if (!raw.ok()) return raw.status();
  digest.Update(raw->images.data(), raw->images.size());
  digest.Update(raw->labels.data(), raw->labels.size());
  Split s;
  s.count = raw->count;
  s.images.resize(raw->images.size());
  for (size_t i = 0; i < raw->images.size(); ++i) {
    s.images[i] = static_cast<float>(raw->images[i]) / 255.0f;
  }
  s.labels = std::move(raw->labels);
  return s;
}

}  // namespace

StatusOr<IdxSplit> ReadIdxSplit(const std::string& dir, const std::string& prefix) {
  std::string images_path = FindFile(dir, prefix + "-images-idx3-ubyte");
  std::string labels_path = FindFile(dir, prefix + "-labels-idx1-ubyte");
  auto images = ReadIdxFile(images_path);
  if (!images.ok()) return images.status();
  auto labels = ReadIdxFile(labels_path);
  if (!labels.ok()) return labels.status();
  if (images->dims.size() != 3 || images->dims[1] != kImageSide || images->dims[2] != kImageSide) {
    return Status::Error("reading IDX file " + images_path +
                         ": expected images of shape N x 28 x 28");
  }
  if (labels->dims.size() != 1) {
    return Status::Error("reading IDX file " + labels_path + ": expected a 1-D array of labels");
  }
  if (labels->dims[0] != images->dims[0]) {
    return Status::Error("reading " + dir + ": " + std::to_string(images->dims[0]) + " images in " +
                         images_path + " but " + std::to_string(labels->dims[0]) + " labels in " +
                         labels_path);
  }
  for (size_t i = 0; i < labels->values.size(); ++i) {
    if (labels->values[i] >= kNumClasses) {
      return Status::Error("reading IDX file " + labels_path + ": label " +
                           std::to_string(labels->values[i]) + " at index " + std::to_string(i) +
                           " is not a class 0..9");
    }
  }
  IdxSplit s;
  s.count = static_cast<int>(images->dims[0]);
  s.images = std::move(images->values);
  s.labels = std::move(labels->values);
  return s;
}

StatusOr<Dataset> LoadDataset(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::Error("data directory " + dir +
                         " does not exist: pass --data-dir with the MNIST-format IDX files, or "
                         "install Debian's dataset-fashion-mnist (hack/install-deps.sh)");
  }
  Sha256 digest;
  Dataset d;
  auto train = LoadSplit(dir, "train", digest);
  if (!train.ok()) return train.status();
  auto test = LoadSplit(dir, "t10k", digest);
  if (!test.ok()) return test.status();
  d.train = std::move(*train);
  d.test = std::move(*test);
  d.digest = ToHex(digest.Final());
  return d;
}

}  // namespace tj::data
