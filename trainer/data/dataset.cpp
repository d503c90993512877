#include "trainer/data/dataset.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "common/little_endian.h"
#include "common/sha256.h"
#include "trainer/data/idx_reader.h"

namespace tj::data {

std::string ImageShape::ToString() const {
  return std::to_string(height) + "x" + std::to_string(width) + "x" + std::to_string(channels);
}

bool ParseImageSize(const std::string& text, ImageShape* shape) {
  const size_t x = text.find('x');
  if (x == std::string::npos || x == 0 || x + 1 == text.size()) return false;
  char* end = nullptr;
  const long h = std::strtol(text.c_str(), &end, 10);
  if (end != text.c_str() + x) return false;
  const long w = std::strtol(text.c_str() + x + 1, &end, 10);
  if (*end != '\0' || h < 1 || h > 32768 || w < 1 || w > 32768) return false;
  shape->height = static_cast<int>(h);
  shape->width = static_cast<int>(w);
  return true;
}

std::string DigestOfImages(ImageShape shape, int classes, std::span<const uint8_t> images,
                           std::span<const int32_t> labels) {
  Sha256 sha;
  std::string header = "tj-image-dataset v1 ";
  header += shape.ToString() + " classes " + std::to_string(classes) + " examples " +
            std::to_string(labels.size()) + "\n";
  sha.Update(header.data(), header.size());
  std::string encoded;
  encoded.reserve(4 * 4096);
  for (size_t i = 0; i < labels.size(); ++i) {
    AppendLittleEndian<uint32_t>(encoded, static_cast<uint32_t>(labels[i]));
    if (encoded.size() >= 4 * 4096) {
      sha.Update(encoded.data(), encoded.size());
      encoded.clear();
    }
  }
  sha.Update(encoded.data(), encoded.size());
  sha.Update(images.data(), images.size());
  return ToHex(sha.Final());
}

StatusOr<std::unique_ptr<InMemoryDataset>> InMemoryDataset::Create(std::string source,
                                                                   ImageShape shape, int classes,
                                                                   std::vector<uint8_t> images,
                                                                   std::vector<int32_t> labels) {
  if (shape.height < 1 || shape.width < 1 || shape.channels < 1) {
    return Status::Error(source + ": images of shape " + shape.ToString() +
                         ": every dimension must be at least 1");
  }
  if (labels.empty()) return Status::Error(source + ": holds no examples");
  if (static_cast<int64_t>(labels.size()) > kMaxExamples) {
    return Status::Error(source + ": " + std::to_string(labels.size()) +
                         " examples, more than the " + std::to_string(kMaxExamples) +
                         " a dataset may hold");
  }
  if (images.size() / shape.Size() != labels.size() || images.size() % shape.Size() != 0) {
    return Status::Error(source + ": " + std::to_string(images.size()) +
                         " bytes of images are not " + std::to_string(labels.size()) +
                         " images of " + shape.ToString());
  }
  if (classes < 1) return Status::Error(source + ": needs at least one class");
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      return Status::Error(source + ": label " + std::to_string(labels[i]) + " of example " +
                           std::to_string(i) + " is not a class 0.." + std::to_string(classes - 1));
    }
  }
  std::unique_ptr<InMemoryDataset> d(new InMemoryDataset());
  d->digest_ = DigestOfImages(shape, classes, images, labels);
  d->source_ = std::move(source);
  d->shape_ = shape;
  d->classes_ = classes;
  d->images_ = std::move(images);
  d->labels_ = std::move(labels);
  return d;
}

Status InMemoryDataset::ReadImage(int index, std::span<uint8_t> pixels) const {
  const size_t bytes = shape_.Size();
  if (index < 0 || index >= size() || pixels.size() < bytes) {
    return Status::Error(source_ + ": example " + std::to_string(index) + " of " +
                         std::to_string(size()) + " (or a buffer of " +
                         std::to_string(pixels.size()) + " bytes for " + std::to_string(bytes) +
                         ")");
  }
  std::memcpy(pixels.data(), images_.data() + static_cast<size_t>(index) * bytes, bytes);
  return Status::Ok();
}

StatusOr<std::unique_ptr<ImageDataset>> OpenIdxDataset(const std::string& dir,
                                                       const std::string& split) {
  if (split != "train" && split != "t10k") {
    return Status::Error("IDX split '" + split + "': expected train or t10k");
  }
  auto raw = ReadIdxSplit(dir, split);
  if (!raw.ok()) return raw.status();
  std::vector<int32_t> labels(raw->labels.begin(), raw->labels.end());
  auto d =
      InMemoryDataset::Create("IDX files " + dir + " (" + split + ")", {kImageSide, kImageSide, 1},
                              kNumClasses, std::move(raw->images), std::move(labels));
  if (!d.ok()) return d.status();
  return std::unique_ptr<ImageDataset>(std::move(*d));
}

}  // namespace tj::data
