// Fuzz target: the NumPy readers (trainer/data/numpy_dataset.h, zip_reader.h), the parsers of a
// tenant's .npy and .npz datasets. The first input byte picks a mode: bit 0 clear parses the
// remaining bytes as one .npy; bit 0 set writes them to a file (reused; removed at exit) and
// opens it as an .npz, both splits, with a 1 MiB limit on arrays. Any bytes must give a result
// or an error, never a crash; an accepted array must hold exactly its shape's bytes, an
// accepted dataset images of its shape.
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "tests/support/temp_dir.h"
#include "trainer/data/numpy_dataset.h"

namespace {

const std::string& InputPath() {
  static const tj::testing::TempDir dir("tj-npz-fuzz");
  static const std::string path = dir.Join("input.npz");
  return path;
}

size_t ItemSize(tj::data::NpyType t) {
  using tj::data::NpyType;
  switch (t) {
    case NpyType::kUint8:
    case NpyType::kInt8:
      return 1;
    case NpyType::kUint16:
    case NpyType::kInt16:
      return 2;
    case NpyType::kUint32:
    case NpyType::kInt32:
    case NpyType::kFloat32:
      return 4;
    default:
      return 8;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    auto array = tj::data::ParseNpy(std::vector<uint8_t>(data + 1, data + size));
    if (!array.ok()) return 0;
    unsigned __int128 count = 1;
    for (uint64_t d : array->shape) count *= d;
    TJ_FUZZ_CHECK(count * ItemSize(array->type) == array->data.size());
    return 0;
  }
  const std::string& path = InputPath();
  TJ_FUZZ_CHECK(tj::testing::WriteBytes(
      path, std::string(reinterpret_cast<const char*>(data + 1), size - 1)));
  for (const char* split : {"train", "test"}) {
    auto d = tj::data::OpenNpzDataset(path, split, tj::data::NumpyOptions{0, 1 << 20});
    if (!d.ok()) {
      TJ_FUZZ_CHECK(d.status().message().find(path) != std::string::npos);
      continue;
    }
    std::vector<uint8_t> pixels((*d)->shape().Size());
    TJ_FUZZ_CHECK((*d)->size() > 0 && (*d)->classes() > 0);
    TJ_FUZZ_CHECK((*d)->ReadImage((*d)->size() - 1, pixels).ok());
    TJ_FUZZ_CHECK((*d)->Label(0) >= 0 && (*d)->Label(0) < (*d)->classes());
  }
  return 0;
}
