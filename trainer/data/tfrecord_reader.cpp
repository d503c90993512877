#include "trainer/data/tfrecord_reader.h"

#include <string_view>
#include <utility>

#include "common/crc32c.h"
#include "common/little_endian.h"

namespace tj::data {
namespace {

constexpr size_t kHeaderBytes = 12;  // length + its CRC
constexpr size_t kFooterBytes = 4;   // the data's CRC

std::string_view AsChars(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace

StatusOr<TfRecordReader> TfRecordReader::Open(const std::string& path, uint64_t max_record_bytes) {
  const std::string context = "TFRecord file " + path;
  auto file = RandomAccessFile::Open(path);
  if (!file.ok()) return file.status().WithContext(context);
  uint8_t start[2] = {0, 0};
  if (file->size() >= 2 && file->ReadAt(0, start).ok()) {
    if (start[0] == 0x1f && start[1] == 0x8b) {
      return Status::Error(context +
                           ": is gzip-compressed (written with compression GZIP); only "
                           "uncompressed TFRecord files are read: decompress it first");
    }
  }
  return TfRecordReader(path, std::move(*file), max_record_bytes);
}

StatusOr<bool> TfRecordReader::Next(std::vector<uint8_t>* record, uint64_t* data_offset,
                                    Sha256* digest) {
  const uint64_t size = file_.size();
  if (offset_ == size) return false;
  const std::string where = "TFRecord file " + path_ + ": record " + std::to_string(records_) +
                            " at offset " + std::to_string(offset_);
  if (size - offset_ < kHeaderBytes) {
    return Status::Error(where + ": truncated: " + std::to_string(size - offset_) +
                         " bytes left, a record header needs 12");
  }
  uint8_t header[kHeaderBytes];
  TJ_RETURN_IF_ERROR(file_.ReadAt(offset_, header).WithContext(where));
  const std::string_view h = AsChars(header);
  const uint64_t length = LoadLittleEndian<uint64_t>(h, 0);
  if (MaskCrc(Crc32c(header, 8)) != LoadLittleEndian<uint32_t>(h, 8)) {
    return Status::Error(where +
                         ": the CRC-32C of the length does not match (a corrupt file, or "
                         "not a TFRecord file; a compressed one must be decompressed first)");
  }
  if (length > max_record_bytes_) {
    return Status::Error(where + ": length " + std::to_string(length) +
                         " bytes, over the limit of " + std::to_string(max_record_bytes_));
  }
  const uint64_t left = size - offset_ - kHeaderBytes;
  if (left < length + kFooterBytes) {
    return Status::Error(where + ": truncated: the record's " + std::to_string(length) +
                         " bytes and CRC need " + std::to_string(length + kFooterBytes) +
                         " but the file has " + std::to_string(left) + " left");
  }
  record->resize(length);
  TJ_RETURN_IF_ERROR(file_.ReadAt(offset_ + kHeaderBytes, *record).WithContext(where));
  uint8_t footer[kFooterBytes];
  TJ_RETURN_IF_ERROR(file_.ReadAt(offset_ + kHeaderBytes + length, footer).WithContext(where));
  if (MaskCrc(Crc32c(record->data(), record->size())) !=
      LoadLittleEndian<uint32_t>(AsChars(footer), 0)) {
    return Status::Error(where + ": the CRC-32C of the record's " + std::to_string(length) +
                         " bytes does not match (a corrupt file)");
  }
  if (digest != nullptr) {
    digest->Update(header, sizeof header);
    digest->Update(record->data(), record->size());
    digest->Update(footer, sizeof footer);
  }
  *data_offset = offset_ + kHeaderBytes;
  offset_ += kHeaderBytes + length + kFooterBytes;
  ++records_;
  return true;
}

std::string FrameTfRecord(std::span<const uint8_t> data) {
  std::string out;
  AppendLittleEndian<uint64_t>(out, data.size());
  AppendLittleEndian<uint32_t>(out, MaskCrc(Crc32c(out.data(), 8)));
  out.append(AsChars(data));
  AppendLittleEndian<uint32_t>(out, MaskCrc(Crc32c(data.data(), data.size())));
  return out;
}

}  // namespace tj::data
