// Fuzz target: ReadIdxFile (trainer/data/idx_reader.h), the MNIST-format IDX reader. It
// takes a path, so each input is written to one temporary file (reused; removed at exit).
// The first input byte picks a mode: bit 0 clear writes the remaining bytes as they are
// (raw IDX, or gzip if the fuzzer makes one); bit 0 set gzips them first, so the fuzzer
// explores IDX headers behind zlib too. Any bytes must give an array or an error, never a
// crash; an accepted array must hold exactly the product of its dimensions.
#include <zlib.h>

#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "tests/support/temp_dir.h"
#include "trainer/data/idx_reader.h"

namespace {

// The one file every input is written to, in a directory removed at exit.
const std::string& InputPath() {
  static const tj::testing::TempDir dir("tj-idx-fuzz");
  static const std::string path = dir.Join("input");
  return path;
}

void WriteRaw(const std::string& path, const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  TJ_FUZZ_CHECK(tj::testing::WriteBytes(path, bytes));
}

void WriteGzip(const std::string& path, const uint8_t* data, size_t size) {
  gzFile f = gzopen(path.c_str(), "wb");
  TJ_FUZZ_CHECK(f != nullptr);
  TJ_FUZZ_CHECK(size == 0 ||
                gzwrite(f, data, static_cast<unsigned>(size)) == static_cast<int>(size));
  TJ_FUZZ_CHECK(gzclose(f) == Z_OK);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string& path = InputPath();
  if ((data[0] & 1) != 0) {
    WriteGzip(path, data + 1, size - 1);
  } else {
    WriteRaw(path, data + 1, size - 1);
  }
  tj::StatusOr<tj::data::IdxArray> array = tj::data::ReadIdxFile(path);
  if (!array.ok()) {
    TJ_FUZZ_CHECK(array.status().message().find(path) != std::string::npos);
    return 0;
  }
  TJ_FUZZ_CHECK(!array->dims.empty() && array->dims.size() <= 4);
  // The product of the dimensions, without overflow: the contract is values.size() == it.
  unsigned __int128 product = 1;
  for (uint32_t d : array->dims) product *= d;
  TJ_FUZZ_CHECK(product == array->values.size());
  return 0;
}
