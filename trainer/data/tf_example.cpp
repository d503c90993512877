#include "trainer/data/tf_example.h"

#include <string_view>

namespace tj::data {
namespace {

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Reads one message's fields from `data`, which starts at `base` in the record (for offsets
// and errors).
class WireReader {
 public:
  WireReader(std::span<const uint8_t> data, size_t base) : data_(data), base_(base) {}

  bool done() const { return pos_ == data_.size(); }

  Status ReadVarint(uint64_t* value) {
    uint64_t v = 0;
    for (int i = 0; i < 10; ++i) {
      if (pos_ == data_.size()) return Error("a varint runs past the end of its message");
      const uint8_t b = data_[pos_++];
      if (i == 9 && b > 1) return Error("a varint longer than 64 bits");
      v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if ((b & 0x80) == 0) {
        *value = v;
        return Status::Ok();
      }
    }
    return Error("a varint longer than 10 bytes");
  }

  Status ReadTag(int* field, int* wire_type) {
    const size_t at = pos_;
    uint64_t tag = 0;
    TJ_RETURN_IF_ERROR(ReadVarint(&tag));
    const uint64_t number = tag >> 3;
    if (number == 0 || number > 0x1fffffff) {
      return ErrorAt(at, "field number " + std::to_string(number) + " is not valid");
    }
    *field = static_cast<int>(number);
    *wire_type = static_cast<int>(tag & 7);
    return Status::Ok();
  }

  // A length-delimited field's bytes and where they start in the record.
  Status ReadLengthDelimited(std::span<const uint8_t>* bytes, size_t* offset) {
    uint64_t length = 0;
    TJ_RETURN_IF_ERROR(ReadVarint(&length));
    if (length > data_.size() - pos_) {
      return Error("a field of " + std::to_string(length) + " bytes but " +
                   std::to_string(data_.size() - pos_) + " are left in its message");
    }
    *bytes = data_.subspan(pos_, static_cast<size_t>(length));
    *offset = base_ + pos_;
    pos_ += static_cast<size_t>(length);
    return Status::Ok();
  }

  Status Skip(int wire_type) {
    uint64_t ignored = 0;
    std::span<const uint8_t> bytes;
    size_t offset = 0;
    switch (wire_type) {
      case kVarint:
        return ReadVarint(&ignored);
      case kFixed64:
        return Advance(8);
      case kLengthDelimited:
        return ReadLengthDelimited(&bytes, &offset);
      case kFixed32:
        return Advance(4);
      default:
        return Error(
            "wire type " + std::to_string(wire_type) +
            (wire_type == 3 || wire_type == 4 ? " (a group) is not supported" : " is not valid"));
    }
  }

  Status Error(const std::string& what) const { return ErrorAt(pos_, what); }

 private:
  Status Advance(size_t n) {
    if (n > data_.size() - pos_) return Error("a fixed-size field runs past the end");
    pos_ += n;
    return Status::Ok();
  }
  Status ErrorAt(size_t pos, const std::string& what) const {
    return Status::Error("malformed tf.train.Example at byte " + std::to_string(base_ + pos) +
                         ": " + what);
  }

  std::span<const uint8_t> data_;
  size_t base_;
  size_t pos_ = 0;
};

struct Span {
  std::span<const uint8_t> bytes;
  size_t offset = 0;
};

// A Feature's one kind: which field (1 bytes_list, 2 float_list, 3 int64_list) and its list.
struct FeatureValue {
  int kind = 0;
  Span list;
};

StatusOr<FeatureValue> ParseFeature(const Span& feature) {
  WireReader r(feature.bytes, feature.offset);
  FeatureValue value;
  while (!r.done()) {
    int field = 0;
    int type = 0;
    TJ_RETURN_IF_ERROR(r.ReadTag(&field, &type));
    if (field >= 1 && field <= 3 && type == kLengthDelimited) {
      value.kind = field;
      TJ_RETURN_IF_ERROR(r.ReadLengthDelimited(&value.list.bytes, &value.list.offset));
    } else {
      TJ_RETURN_IF_ERROR(r.Skip(type));
    }
  }
  return value;
}

const char* KindName(int kind) {
  switch (kind) {
    case 1:
      return "a bytes_list";
    case 2:
      return "a float_list";
    case 3:
      return "an int64_list";
    default:
      return "empty (no list)";
  }
}

// The first bytes value of a BytesList.
StatusOr<Span> FirstBytes(const Span& list, const std::string& key) {
  WireReader r(list.bytes, list.offset);
  while (!r.done()) {
    int field = 0;
    int type = 0;
    TJ_RETURN_IF_ERROR(r.ReadTag(&field, &type));
    if (field == 1 && type == kLengthDelimited) {
      Span value;
      TJ_RETURN_IF_ERROR(r.ReadLengthDelimited(&value.bytes, &value.offset));
      return value;
    }
    TJ_RETURN_IF_ERROR(r.Skip(type));
  }
  return Status::Error("feature '" + key + "' holds no value");
}

// The first value of an Int64List, packed (one length-delimited field) or not.
StatusOr<int64_t> FirstInt64(const Span& list, const std::string& key) {
  WireReader r(list.bytes, list.offset);
  while (!r.done()) {
    int field = 0;
    int type = 0;
    TJ_RETURN_IF_ERROR(r.ReadTag(&field, &type));
    uint64_t v = 0;
    if (field == 1 && type == kVarint) {
      TJ_RETURN_IF_ERROR(r.ReadVarint(&v));
      return static_cast<int64_t>(v);
    }
    if (field == 1 && type == kLengthDelimited) {
      Span packed;
      TJ_RETURN_IF_ERROR(r.ReadLengthDelimited(&packed.bytes, &packed.offset));
      if (packed.bytes.empty()) continue;
      WireReader values(packed.bytes, packed.offset);
      TJ_RETURN_IF_ERROR(values.ReadVarint(&v));
      return static_cast<int64_t>(v);
    }
    TJ_RETURN_IF_ERROR(r.Skip(type));
  }
  return Status::Error("feature '" + key + "' holds no value");
}

// A key as it may be shown in an error: printable ASCII, at most 40 characters.
std::string Printable(std::string_view key) {
  std::string out;
  for (char c : key.substr(0, 40)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (key.size() > 40) out += "...";
  return out;
}

// The best match so far among `keys` (a lower index is better).
struct Match {
  int rank = -1;  // -1: none
  std::string key;
  Span feature;
};

template <size_t N>
void Consider(Match& match, std::string_view key, const Span& feature,
              const char* const (&keys)[N]) {
  for (size_t i = 0; i < N; ++i) {
    if (key == keys[i] && (match.rank < 0 || static_cast<int>(i) <= match.rank)) {
      match = {static_cast<int>(i), std::string(key), feature};
    }
  }
}

void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void AppendField(std::string& out, int field, std::string_view bytes) {
  AppendVarint(out, (static_cast<uint64_t>(field) << 3) | kLengthDelimited);
  AppendVarint(out, bytes.size());
  out.append(bytes);
}

std::string MapEntry(const std::string& key, const std::string& feature) {
  std::string entry;
  AppendField(entry, 1, key);
  AppendField(entry, 2, feature);
  return entry;
}

}  // namespace

StatusOr<ImageExample> ParseImageExample(std::span<const uint8_t> record) {
  Match image;
  Match label;
  std::string keys_seen;
  int keys = 0;
  WireReader example(record, 0);
  while (!example.done()) {
    int field = 0;
    int type = 0;
    TJ_RETURN_IF_ERROR(example.ReadTag(&field, &type));
    if (field != 1 || type != kLengthDelimited) {
      TJ_RETURN_IF_ERROR(example.Skip(type));
      continue;
    }
    Span features;
    TJ_RETURN_IF_ERROR(example.ReadLengthDelimited(&features.bytes, &features.offset));
    WireReader map(features.bytes, features.offset);
    while (!map.done()) {
      TJ_RETURN_IF_ERROR(map.ReadTag(&field, &type));
      if (field != 1 || type != kLengthDelimited) {
        TJ_RETURN_IF_ERROR(map.Skip(type));
        continue;
      }
      Span entry;
      TJ_RETURN_IF_ERROR(map.ReadLengthDelimited(&entry.bytes, &entry.offset));
      WireReader e(entry.bytes, entry.offset);
      Span key;
      Span feature;
      while (!e.done()) {
        TJ_RETURN_IF_ERROR(e.ReadTag(&field, &type));
        if ((field == 1 || field == 2) && type == kLengthDelimited) {
          TJ_RETURN_IF_ERROR(e.ReadLengthDelimited(field == 1 ? &key.bytes : &feature.bytes,
                                                   field == 1 ? &key.offset : &feature.offset));
        } else {
          TJ_RETURN_IF_ERROR(e.Skip(type));
        }
      }
      const std::string_view name(reinterpret_cast<const char*>(key.bytes.data()),
                                  key.bytes.size());
      if (++keys <= 8) keys_seen += (keys_seen.empty() ? "'" : ", '") + Printable(name) + "'";
      Consider(image, name, feature, kImageKeys);
      Consider(label, name, feature, kLabelKeys);
    }
  }
  if (keys > 8) keys_seen += ", ... (" + std::to_string(keys) + " in all)";
  if (keys_seen.empty()) keys_seen = "none";
  if (image.rank < 0 || label.rank < 0) {
    return Status::Error(std::string("tf.train.Example without ") +
                         (image.rank < 0 ? "an image (feature 'image/encoded' or 'image')"
                                         : "a label (feature 'image/class/label' or 'label')") +
                         "; its features: " + keys_seen);
  }
  auto image_value = ParseFeature(image.feature);
  if (!image_value.ok()) return image_value.status();
  if (image_value->kind != 1) {
    return Status::Error("feature '" + image.key + "' is " + KindName(image_value->kind) +
                         ", not a bytes_list of encoded JPEG or PNG");
  }
  auto label_value = ParseFeature(label.feature);
  if (!label_value.ok()) return label_value.status();
  if (label_value->kind != 3) {
    return Status::Error("feature '" + label.key + "' is " + KindName(label_value->kind) +
                         ", not an int64_list");
  }
  auto bytes = FirstBytes(image_value->list, image.key);
  if (!bytes.ok()) return bytes.status();
  auto class_label = FirstInt64(label_value->list, label.key);
  if (!class_label.ok()) return class_label.status();
  if (*class_label < 0) {
    return Status::Error("feature '" + label.key + "': label " + std::to_string(*class_label) +
                         " is negative");
  }
  return ImageExample{bytes->offset, bytes->bytes.size(), *class_label};
}

std::string SerializeImageExample(std::span<const uint8_t> image, int64_t label,
                                  const std::string& image_key, const std::string& label_key) {
  std::string bytes_list;
  AppendField(bytes_list, 1,
              std::string_view(reinterpret_cast<const char*>(image.data()), image.size()));
  std::string image_feature;
  AppendField(image_feature, 1, bytes_list);
  std::string packed;
  AppendVarint(packed, static_cast<uint64_t>(label));
  std::string int64_list;
  AppendField(int64_list, 1, packed);
  std::string label_feature;
  AppendField(label_feature, 3, int64_list);
  std::string features;
  AppendField(features, 1, MapEntry(image_key, image_feature));
  AppendField(features, 1, MapEntry(label_key, label_feature));
  std::string example;
  AppendField(example, 1, features);
  return example;
}

}  // namespace tj::data
