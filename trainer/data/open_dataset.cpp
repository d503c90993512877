#include "trainer/data/open_dataset.h"

#include <vector>

#include "trainer/data/image_folder_dataset.h"
#include "trainer/data/numpy_dataset.h"
#include "trainer/data/tfrecord_dataset.h"

namespace tj::data {
namespace {

constexpr struct {
  DatasetFormat format;
  const char* name;
} kFormats[] = {{DatasetFormat::kIdx, "idx"},
                {DatasetFormat::kNpz, "npz"},
                {DatasetFormat::kNpy, "npy"},
                {DatasetFormat::kFolder, "folder"},
                {DatasetFormat::kTfRecord, "tfrecord"}};

}  // namespace

const char* DatasetFormatName(DatasetFormat format) {
  for (const auto& f : kFormats) {
    if (f.format == format) return f.name;
  }
  return "?";
}

bool ParseDatasetFormat(const std::string& name, DatasetFormat* format) {
  for (const auto& f : kFormats) {
    if (name == f.name) {
      *format = f.format;
      return true;
    }
  }
  return false;
}

bool SplitNpyPair(const std::string& value, std::string* images, std::string* labels) {
  const size_t comma = value.find(',');
  if (comma == std::string::npos || value.find(',', comma + 1) != std::string::npos) return false;
  *images = value.substr(0, comma);
  *labels = value.substr(comma + 1);
  return !images->empty() && !labels->empty();
}

StatusOr<std::unique_ptr<ImageDataset>> OpenDataset(DatasetFormat format, const std::string& path,
                                                    const OpenOptions& o) {
  NumpyOptions numpy;
  numpy.classes = o.classes;
  numpy.max_array_bytes = o.limits.max_array_bytes;
  switch (format) {
    case DatasetFormat::kIdx:
      return OpenIdxDataset(path, o.split == "test" ? "t10k" : "train");
    case DatasetFormat::kNpz:
      return OpenNpzDataset(path, o.split, numpy);
    case DatasetFormat::kNpy: {
      std::string images, labels;
      if (!SplitNpyPair(path, &images, &labels)) {
        return Status::Error("npy dataset '" + path + "': give two files, IMAGES.npy,LABELS.npy");
      }
      return OpenNpyDataset(images, labels, numpy);
    }
    case DatasetFormat::kFolder: {
      ImageFolderOptions folder;
      folder.shape = o.shape;
      folder.max_file_bytes = o.limits.max_image_bytes;
      return OpenImageFolder(path, folder);
    }
    case DatasetFormat::kTfRecord: {
      StatusOr<std::vector<std::string>> files = ListTfRecordFiles(path);
      if (!files.ok()) return files.status();
      TfRecordOptions tfrecord;
      tfrecord.shape = o.shape;
      tfrecord.classes = o.classes;
      tfrecord.max_record_bytes = o.limits.max_record_bytes;
      return OpenTfRecordDataset(*files, tfrecord);
    }
  }
  return Status::Error("unknown dataset format");
}

}  // namespace tj::data
