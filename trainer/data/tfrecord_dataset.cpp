#include "trainer/data/tfrecord_dataset.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "common/sha256.h"
#include "trainer/data/tf_example.h"
#include "trainer/data/tfrecord_reader.h"

namespace tj::data {
namespace {

namespace fs = std::filesystem;

struct RecordImage {
  uint64_t offset;  // of the encoded image in its file
  uint32_t size;
  uint32_t file;
  int32_t record;
  int32_t label;
};

class TfRecordDataset final : public ImageDataset {
 public:
  TfRecordDataset(std::vector<std::string> paths, std::vector<RandomAccessFile> files,
                  std::vector<RecordImage> examples, TfRecordOptions options, int classes)
      : paths_(std::move(paths)),
        files_(std::move(files)),
        examples_(std::move(examples)),
        options_(options),
        classes_(classes),
        source_("TFRecord files " + paths_.front() +
                (paths_.size() > 1 ? " and " + std::to_string(paths_.size() - 1) + " more" : "")) {}

  void set_shape(ImageShape shape) { options_.shape = shape; }
  void set_digest(std::string digest) { digest_ = std::move(digest); }

  int size() const override { return static_cast<int>(examples_.size()); }
  ImageShape shape() const override { return options_.shape; }
  int classes() const override { return classes_; }
  const std::string& digest() const override { return digest_; }
  const std::string& source() const override { return source_; }
  int Label(int index) const override { return examples_[static_cast<size_t>(index)].label; }

  std::string Where(int index) const {
    const RecordImage& e = examples_[static_cast<size_t>(index)];
    return "TFRecord file " + paths_[e.file] + ": record " + std::to_string(e.record) +
           " (image at offset " + std::to_string(e.offset) + ")";
  }

  StatusOr<std::vector<uint8_t>> ReadEncoded(int index) const {
    const RecordImage& e = examples_[static_cast<size_t>(index)];
    std::vector<uint8_t> bytes(e.size);
    Status s = files_[e.file].ReadAt(e.offset, bytes);
    if (!s.ok()) return s.WithContext(Where(index));
    return bytes;
  }

  Status ReadImage(int index, std::span<uint8_t> pixels) const override {
    if (index < 0 || index >= size() || pixels.size() < shape().Size()) {
      return Status::Error(source_ + ": no example " + std::to_string(index) + " of " +
                           std::to_string(size()) + " (or a buffer too small)");
    }
    auto bytes = ReadEncoded(index);
    if (!bytes.ok()) return bytes.status();
    return DecodeAndFit(*bytes, shape(), options_.limits, pixels).WithContext(Where(index));
  }

 private:
  std::vector<std::string> paths_;
  std::vector<RandomAccessFile> files_;
  std::vector<RecordImage> examples_;
  TfRecordOptions options_;
  int classes_;
  std::string digest_;
  std::string source_;
};

}  // namespace

StatusOr<std::vector<std::string>> ListTfRecordFiles(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) return Status::Error("TFRecord path " + path + ": not found");
    return std::vector<std::string>{path};
  }
  std::vector<std::string> files;
  fs::directory_iterator it(path, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.' || !fs::is_regular_file(it->path(), ec)) continue;
    files.push_back(it->path().string());
  }
  if (ec) return Status::Error("TFRecord directory " + path + ": cannot list: " + ec.message());
  if (files.empty()) return Status::Error("TFRecord directory " + path + ": holds no files");
  std::sort(files.begin(), files.end());
  return files;
}

StatusOr<std::unique_ptr<ImageDataset>> OpenTfRecordDataset(const std::vector<std::string>& files,
                                                            const TfRecordOptions& options) {
  if (files.empty()) return Status::Error("a TFRecord dataset needs at least one file");
  const std::string context = "TFRecord files " + files.front();
  if (options.shape.channels != 1 && options.shape.channels != 3) {
    return Status::Error(context + ": channels " + std::to_string(options.shape.channels) +
                         ": 1 (grey) or 3 (RGB)");
  }
  if (options.shape.height < 0 || options.shape.width < 0 ||
      (options.shape.height == 0) != (options.shape.width == 0)) {
    return Status::Error(context + ": image size " + options.shape.ToString() +
                         ": give both height and width, or neither (the first image's)");
  }
  if (options.classes < 0) return Status::Error(context + ": classes must be 0 or more");
  if (options.max_record_bytes > 0xffffffffu) {
    return Status::Error(context + ": records are limited to 4 GiB");
  }
  Sha256 sha;
  std::string header = "tj-tfrecord v1 " + options.shape.ToString() + " classes " +
                       std::to_string(options.classes) + "\n";
  sha.Update(header.data(), header.size());
  std::vector<RandomAccessFile> opened;
  std::vector<RecordImage> examples;
  int64_t max_label = -1;
  std::vector<uint8_t> record;
  for (size_t f = 0; f < files.size(); ++f) {
    auto reader = TfRecordReader::Open(files[f], options.max_record_bytes);
    if (!reader.ok()) return reader.status();
    while (true) {
      uint64_t data_offset = 0;
      auto more = reader->Next(&record, &data_offset, &sha);
      if (!more.ok()) return more.status();
      if (!*more) break;
      const std::string where = "TFRecord file " + files[f] + ": record " +
                                std::to_string(reader->records_read() - 1) + " at offset " +
                                std::to_string(data_offset - 12);
      auto example = ParseImageExample(record);
      if (!example.ok()) return example.status().WithContext(where);
      if (example->label >= kMaxExamples ||
          (options.classes > 0 && example->label >= options.classes)) {
        return Status::Error(
            where + ": label " + std::to_string(example->label) + " is not a class 0.." +
            std::to_string(options.classes > 0 ? options.classes - 1 : kMaxExamples - 1));
      }
      if (static_cast<int64_t>(examples.size()) >= kMaxExamples) {
        return Status::Error(where + ": more than " + std::to_string(kMaxExamples) + " examples");
      }
      max_label = std::max(max_label, example->label);
      examples.push_back({data_offset + example->image_offset,
                          static_cast<uint32_t>(example->image_size), static_cast<uint32_t>(f),
                          reader->records_read() - 1, static_cast<int32_t>(example->label)});
    }
    opened.push_back(std::move(*reader).TakeFile());
  }
  if (examples.empty()) return Status::Error(context + ": no records");
  const int classes = options.classes > 0 ? options.classes : static_cast<int>(max_label + 1);
  auto dataset = std::make_unique<TfRecordDataset>(files, std::move(opened), std::move(examples),
                                                   options, classes);
  dataset->set_digest(ToHex(sha.Final()));
  if (options.shape.height == 0) {
    auto bytes = dataset->ReadEncoded(0);
    if (!bytes.ok()) return bytes.status();
    auto first = DecodeImage(*bytes, options.shape.channels, options.limits);
    if (!first.ok()) {
      return first.status().WithContext(dataset->Where(0) +
                                        " (the first image, which sets the dataset's size)");
    }
    dataset->set_shape(first->shape);
  }
  return std::unique_ptr<ImageDataset>(std::move(dataset));
}

}  // namespace tj::data
