#include "trainer/data/image_folder_dataset.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <utility>
#include <vector>

#include "common/sha256.h"
#include "trainer/data/file_reader.h"

namespace tj::data {
namespace {

namespace fs = std::filesystem;

bool IsImageName(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

// The names in `dir` that do not start with '.', sorted by byte value.
StatusOr<std::vector<std::string>> ListNames(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  fs::directory_iterator it(dir, ec);
  if (ec) return Status::Error("cannot list " + dir.string() + ": " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!name.empty() && name[0] != '.') names.push_back(std::move(name));
    if (static_cast<int64_t>(names.size()) > kMaxExamples) {
      return Status::Error(dir.string() + " holds more than " + std::to_string(kMaxExamples) +
                           " entries");
    }
  }
  if (ec) return Status::Error("cannot list " + dir.string() + ": " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

class ImageFolderDataset final : public ImageDataset {
 public:
  struct Example {
    std::string path;  // under the root: <class>/<name>
    int label;
  };

  ImageFolderDataset(std::string root, ImageFolderOptions options, int classes,
                     std::vector<Example> examples, std::string digest)
      : root_(std::move(root)),
        options_(options),
        classes_(classes),
        examples_(std::move(examples)),
        digest_(std::move(digest)),
        source_("image folder " + root_) {}

  void set_shape(ImageShape shape) { options_.shape = shape; }

  int size() const override { return static_cast<int>(examples_.size()); }
  ImageShape shape() const override { return options_.shape; }
  int classes() const override { return classes_; }
  const std::string& digest() const override { return digest_; }
  const std::string& source() const override { return source_; }
  int Label(int index) const override { return examples_[static_cast<size_t>(index)].label; }

  StatusOr<std::vector<uint8_t>> ReadFile(int index) const {
    const std::string& path = examples_[static_cast<size_t>(index)].path;
    auto bytes = ReadFileBounded(root_ + "/" + path, options_.max_file_bytes);
    if (!bytes.ok()) return bytes.status().WithContext(source_ + ": " + path);
    return bytes;
  }

  Status ReadImage(int index, std::span<uint8_t> pixels) const override {
    if (index < 0 || index >= size() || pixels.size() < shape().Size()) {
      return Status::Error(source_ + ": no example " + std::to_string(index) + " of " +
                           std::to_string(size()) + " (or a buffer too small)");
    }
    auto bytes = ReadFile(index);
    if (!bytes.ok()) return bytes.status();
    return DecodeAndFit(*bytes, shape(), options_.limits, pixels)
        .WithContext(source_ + ": " + examples_[static_cast<size_t>(index)].path);
  }

 private:
  std::string root_;
  ImageFolderOptions options_;
  int classes_;
  std::vector<Example> examples_;
  std::string digest_;
  std::string source_;
};

}  // namespace

StatusOr<std::unique_ptr<ImageDataset>> OpenImageFolder(const std::string& root,
                                                        const ImageFolderOptions& options) {
  const std::string context = "image folder " + root;
  if (options.shape.channels != 1 && options.shape.channels != 3) {
    return Status::Error(context + ": channels " + std::to_string(options.shape.channels) +
                         ": 1 (grey) or 3 (RGB)");
  }
  if (options.shape.height < 0 || options.shape.width < 0 ||
      (options.shape.height == 0) != (options.shape.width == 0)) {
    return Status::Error(context + ": image size " + options.shape.ToString() +
                         ": give both height and width, or neither (the first image's)");
  }
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return Status::Error(context + ": not a directory (expected <root>/<class>/<image>)");
  }
  auto class_names = ListNames(root);
  if (!class_names.ok()) return class_names.status().WithContext(context);

  Sha256 sha;
  std::string header = "tj-image-folder v1 " + options.shape.ToString() + " content " +
                       (options.content_digest ? "1" : "0") + "\n";
  sha.Update(header.data(), header.size());
  std::vector<ImageFolderDataset::Example> examples;
  for (size_t label = 0; label < class_names->size(); ++label) {
    const std::string& class_name = (*class_names)[label];
    const fs::path class_dir = fs::path(root) / class_name;
    if (!fs::is_directory(class_dir, ec)) {
      return Status::Error(context + ": " + class_name +
                           " is a file directly under the root; expected one folder per class "
                           "(<root>/<class>/<image>)");
    }
    auto names = ListNames(class_dir);
    if (!names.ok()) return names.status().WithContext(context);
    if (names->empty()) {
      return Status::Error(context + ": class folder " + class_name + " holds no images");
    }
    std::string class_line = "class " + class_name + "\n";
    sha.Update(class_line.data(), class_line.size());
    for (const std::string& name : *names) {
      const std::string relative = class_name + "/" + name;
      const fs::path path = class_dir / name;
      const fs::file_status st = fs::status(path, ec);
      if (fs::is_directory(st)) {
        return Status::Error(context + ": " + relative +
                             " is a folder inside a class folder; expected only images "
                             "(<root>/<class>/<image>)");
      }
      if (!IsImageName(name)) {
        return Status::Error(context + ": " + relative +
                             " is not a .jpg, .jpeg or .png file (rename or remove it)");
      }
      if (!fs::is_regular_file(st)) {
        return Status::Error(context + ": " + relative + " is not a regular file" +
                             (ec ? " (" + ec.message() + ")" : ""));
      }
      if (static_cast<int64_t>(examples.size()) >= kMaxExamples) {
        return Status::Error(context + ": more than " + std::to_string(kMaxExamples) + " images");
      }
      std::string line = std::to_string(label) + " " + relative;
      if (options.content_digest) {
        auto bytes = ReadFileBounded(path.string(), options.max_file_bytes);
        if (!bytes.ok()) return bytes.status().WithContext(context + ": " + relative);
        if (DetectImageFormat(*bytes) == ImageFormat::kUnknown) {
          return Status::Error(context + ": " + relative + ": neither JPEG nor PNG");
        }
        line += " " + std::to_string(bytes->size()) + " " +
                ToHex(Sha256Of(bytes->data(), bytes->size()));
      } else {
        const uintmax_t size = fs::file_size(path, ec);
        if (ec) return Status::Error(context + ": " + relative + ": " + ec.message());
        if (size > options.max_file_bytes) {
          return Status::Error(context + ": " + relative + ": holds " + std::to_string(size) +
                               " bytes, over the limit of " +
                               std::to_string(options.max_file_bytes));
        }
        line += " " + std::to_string(size);
      }
      line += "\n";
      sha.Update(line.data(), line.size());
      examples.push_back({relative, static_cast<int>(label)});
    }
  }
  if (examples.empty()) {
    return Status::Error(context +
                         ": no class folders; expected <root>/<class>/<image>.jpg|.jpeg|.png");
  }
  const int classes = static_cast<int>(class_names->size());
  auto dataset = std::make_unique<ImageFolderDataset>(root, options, classes, std::move(examples),
                                                      ToHex(sha.Final()));
  if (options.shape.height == 0) {  // the first image's size
    auto bytes = dataset->ReadFile(0);
    if (!bytes.ok()) return bytes.status();
    auto first = DecodeImage(*bytes, options.shape.channels, options.limits);
    if (!first.ok()) {
      return first.status().WithContext(context + ": " + (*class_names)[0] +
                                        " (its first image, which sets the dataset's size)");
    }
    dataset->set_shape(first->shape);
  }
  return std::unique_ptr<ImageDataset>(std::move(dataset));
}

}  // namespace tj::data
