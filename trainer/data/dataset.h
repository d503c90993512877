// A labelled image dataset behind one interface, whatever the files hold: N examples, each an
// H x W x C uint8 image (row-major, channels last) and a label in [0, classes). Examples are
// read by index, so the epoch order and the shards of epoch_order.h drive any dataset, from
// any number of threads. The readers: IDX (here), NumPy .npy/.npz (numpy_dataset.h), image
// folders (image_folder_dataset.h) and TFRecord files (tfrecord_dataset.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::data {

// The shape of every image of a dataset.
struct ImageShape {
  int height = 0;
  int width = 0;
  int channels = 0;

  // Bytes of one uint8 image (values of one float image).
  size_t Size() const {
    return static_cast<size_t>(height) * static_cast<size_t>(width) * static_cast<size_t>(channels);
  }
  bool operator==(const ImageShape&) const = default;
  std::string ToString() const;  // "32x32x3" (height x width x channels)
};

// "HxW" (each side 1..32768, e.g. "32x32", what --image-size and tj-dataset's --size take) into
// `shape`'s height and width; false, `shape` untouched, when `text` is not that.
bool ParseImageSize(const std::string& text, ImageShape* shape);

// The most examples a dataset may hold: the epoch order's indices are int.
inline constexpr int64_t kMaxExamples = 0x7fffffff;

class ImageDataset {
 public:
  virtual ~ImageDataset() = default;

  virtual int size() const = 0;
  virtual ImageShape shape() const = 0;
  virtual int classes() const = 0;
  // SHA-256 (hex) identifying the content: what a backup's fingerprint records, so a run
  // resumed on other data is refused. Each reader documents what it covers.
  virtual const std::string& digest() const = 0;
  // What the examples are read from, for logs and errors: "image folder /data/train".
  virtual const std::string& source() const = 0;
  // Example `index`'s label (0 <= index < size()), without decoding its image.
  virtual int Label(int index) const = 0;
  // Writes example `index`'s image (shape().Size() bytes, `pixels` at least that long). An
  // error names the file and the record and what is wrong with them (an image that does not
  // decode). Thread-safe: any number of threads may call it at once, with any indices.
  virtual Status ReadImage(int index, std::span<uint8_t> pixels) const = 0;
};

// Examples held in memory, already decoded: what the IDX and NumPy readers load, and what
// tests build.
class InMemoryDataset final : public ImageDataset {
 public:
  // `images` holds labels.size() images of `shape`, one after the other; every label must be
  // in [0, classes). The digest is DigestOfImages() of the same.
  static StatusOr<std::unique_ptr<InMemoryDataset>> Create(std::string source, ImageShape shape,
                                                           int classes, std::vector<uint8_t> images,
                                                           std::vector<int32_t> labels);

  int size() const override { return static_cast<int>(labels_.size()); }
  ImageShape shape() const override { return shape_; }
  int classes() const override { return classes_; }
  const std::string& digest() const override { return digest_; }
  const std::string& source() const override { return source_; }
  int Label(int index) const override { return labels_[static_cast<size_t>(index)]; }
  Status ReadImage(int index, std::span<uint8_t> pixels) const override;

 private:
  InMemoryDataset() = default;
  std::string source_;
  ImageShape shape_;
  int classes_ = 0;
  std::vector<uint8_t> images_;
  std::vector<int32_t> labels_;
  std::string digest_;
};

// SHA-256 (hex) over the shape, the class count, the example count, the labels (int32,
// little-endian) and the pixels: the same decoded examples give the same digest whichever
// file format held them (an .npz of Fashion-MNIST and its IDX files agree).
std::string DigestOfImages(ImageShape shape, int classes, std::span<const uint8_t> images,
                           std::span<const int32_t> labels);

// One split of a directory of MNIST-format IDX files (idx_reader.h's LoadDataset files):
// `split` "train" or "t10k"; 28x28x1 images, classes 0..9, errors as ReadIdxFile's.
StatusOr<std::unique_ptr<ImageDataset>> OpenIdxDataset(const std::string& dir,
                                                       const std::string& split);

}  // namespace tj::data
