// A dataset of image files, one folder per class, as Keras' image_dataset_from_directory
// reads them:
//
//   <root>/<class>/<name>.jpg|.jpeg|.png     (extensions in any case)
//
// Classes are the folders' names sorted by byte value, labelled 0, 1, ... in that order;
// examples are class by class, files sorted by name within each. Entries whose names start
// with '.' are skipped. Anything else is refused when the dataset is opened, naming the entry:
// a file directly under the root, a folder inside a class folder, a file of another
// extension, an empty class folder, no class folder at all. Images are decoded when read
// (image_decoder.h) and fitted to the configured shape (covering scale, centre crop).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "trainer/data/dataset.h"
#include "trainer/data/image_decoder.h"

namespace tj::data {

struct ImageFolderOptions {
  // The dataset's shape: channels 1 (grey) or 3 (RGB); height and width 0: the first image's.
  ImageShape shape{0, 0, 3};
  // Files larger than this are refused when opened.
  uint64_t max_file_bytes = uint64_t{64} << 20;
  DecodeLimits limits;
  // true: the digest covers every file's bytes (each file is read once when opened); false:
  // only the names and sizes (for trees too large to read twice).
  bool content_digest = true;
};

// Lists and checks `root` (and, with content_digest, reads every file once). The digest:
// SHA-256 over the shape, the class names, and per example its class, its path under the root,
// its size and (with content_digest) the SHA-256 of its bytes.
StatusOr<std::unique_ptr<ImageDataset>> OpenImageFolder(const std::string& root,
                                                        const ImageFolderOptions& options);

}  // namespace tj::data
