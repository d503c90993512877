// Fuzz target: the TFRecord framing and tf.train.Example reader (trainer/data/tfrecord_reader.h,
// tf_example.h), the parsers of a tenant's TFRecord datasets. The first input byte picks a
// mode: bit 0 clear parses the remaining bytes as one Example; bit 0 set writes them to a file
// (reused; removed at exit) and reads every record of it, parsing each as an Example. Any bytes
// must give a result or an error, never a crash; an accepted image must lie inside its record.
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "tests/support/temp_dir.h"
#include "trainer/data/tf_example.h"
#include "trainer/data/tfrecord_reader.h"

namespace {

const std::string& InputPath() {
  static const tj::testing::TempDir dir("tj-tfrecord-fuzz");
  static const std::string path = dir.Join("input.tfrecord");
  return path;
}

void CheckExample(std::span<const uint8_t> record) {
  auto example = tj::data::ParseImageExample(record);
  if (!example.ok()) {
    TJ_FUZZ_CHECK(!example.status().message().empty());
    return;
  }
  TJ_FUZZ_CHECK(example->image_offset <= record.size());
  TJ_FUZZ_CHECK(example->image_size <= record.size() - example->image_offset);
  TJ_FUZZ_CHECK(example->label >= 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    CheckExample({data + 1, size - 1});
    return 0;
  }
  const std::string& path = InputPath();
  TJ_FUZZ_CHECK(tj::testing::WriteBytes(
      path, std::string(reinterpret_cast<const char*>(data + 1), size - 1)));
  auto reader = tj::data::TfRecordReader::Open(path, 1 << 16);
  if (!reader.ok()) return 0;
  std::vector<uint8_t> record;
  uint64_t offset = 0;
  while (true) {
    auto more = reader->Next(&record, &offset);
    if (!more.ok()) {
      TJ_FUZZ_CHECK(more.status().message().find(path) != std::string::npos);
      return 0;
    }
    if (!*more) return 0;
    TJ_FUZZ_CHECK(offset + record.size() <= size - 1);
    CheckExample(record);
  }
}
