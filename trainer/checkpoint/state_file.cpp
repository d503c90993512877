#include "trainer/checkpoint/state_file.h"

#include <openssl/crypto.h>

#include <bit>
#include <cstring>
#include <set>

#include "common/json_nesting.h"
#include "common/little_endian.h"
#include "common/sha256.h"
#include "trainer/checkpoint/atomic_file.h"
#include "trainer/checkpoint/volume_file.h"

namespace tj::checkpoint {
namespace {

constexpr size_t kMagicSize = sizeof(kStateFileMagic);
constexpr size_t kFixedSize = kMagicSize + 4 + 8;  // magic, version, header length
constexpr size_t kDigestSize = 32;
constexpr size_t kTrailerSize = 2 * kDigestSize;  // SHA-256, then the HMAC

void AppendFloats(std::string& out, const std::vector<float>& values) {
  const size_t start = out.size();
  out.resize(start + values.size() * sizeof(float));
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(out.data() + start, values.data(), values.size() * 4);
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t bits = std::bit_cast<uint32_t>(values[i]);
      for (int b = 0; b < 4; ++b) out[start + 4 * i + b] = static_cast<char>(bits >> (8 * b));
    }
  }
}

void ReadFloats(const std::string& in, size_t offset, size_t count, std::vector<float>& out) {
  out.resize(count);
  if constexpr (std::endian::native == std::endian::little) {
    if (count > 0) std::memcpy(out.data(), in.data() + offset, count * 4);
  } else {
    for (size_t i = 0; i < count; ++i)
      out[i] = std::bit_cast<float>(LoadLittleEndian<uint32_t>(in, offset + 4 * i));
  }
}

std::string Short(const nlohmann::json& v) {
  if (v.is_null()) return "none";
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

void Diff(const nlohmann::json& expected, const nlohmann::json& found, const std::string& path,
          std::vector<std::string>& out) {
  if (expected.is_object() && found.is_object()) {
    std::set<std::string> keys;
    for (auto it = expected.begin(); it != expected.end(); ++it) keys.insert(it.key());
    for (auto it = found.begin(); it != found.end(); ++it) keys.insert(it.key());
    for (const std::string& k : keys) {
      const std::string sub = path.empty() ? k : path + "." + k;
      const nlohmann::json e = expected.contains(k) ? expected.at(k) : nlohmann::json();
      const nlohmann::json f = found.contains(k) ? found.at(k) : nlohmann::json();
      Diff(e, f, sub, out);
    }
    return;
  }
  if (expected == found) return;
  out.push_back((path.empty() ? std::string("fingerprint") : path) + ": backup has " +
                Short(found) + ", this run has " + Short(expected));
}

// The header fields, parsed and checked against the file's size.
struct Header {
  nlohmann::json json;
  std::vector<std::pair<std::string, uint64_t>> tensors;  // name, element count
  uint64_t data_bytes = 0;
};

StatusOr<Header> ParseHeader(const std::string& text) {
  Header h;
  if (text.size() > kMaxStateHeaderBytes) {
    return Status::Error("malformed header: " + std::to_string(text.size()) +
                         " bytes, more than the " + std::to_string(kMaxStateHeaderBytes) +
                         " a state file's header may have");
  }
  if (const size_t depth = JsonNesting(text); depth > kMaxStateHeaderNesting) {
    return Status::Error("malformed header: nested " + std::to_string(depth) +
                         " deep, deeper than the " + std::to_string(kMaxStateHeaderNesting) +
                         " a state file's header may be");
  }
  try {
    h.json = nlohmann::json::parse(text);
    if (!h.json.is_object()) return Status::Error("malformed header: not a JSON object");
    for (const char* key :
         {"epoch", "step", "optimizer_iterations", "seed", "tensors", "data_bytes"}) {
      if (!h.json.contains(key))
        return Status::Error(std::string("malformed header: no \"") + key + "\"");
    }
    // Counters and sizes must be JSON integers: converting a float out of their range
    // (1e300, -1.5) to an integer type is undefined behaviour, not an error.
    for (const char* key : {"epoch", "step", "optimizer_iterations", "seed", "data_bytes"}) {
      if (!h.json.at(key).is_number_integer())
        return Status::Error(std::string("malformed header: \"") + key + "\" is not an integer");
    }
    for (const auto& t : h.json.at("tensors")) {
      if (!t.at("count").is_number_integer())
        return Status::Error("malformed header: a tensor's \"count\" is not an integer");
      h.tensors.emplace_back(t.at("name").get<std::string>(), t.at("count").get<uint64_t>());
    }
    h.data_bytes = h.json.at("data_bytes").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(std::string("malformed header: ") + e.what());
  }
  return h;
}

}  // namespace

const std::vector<float>* TrainingState::FindTensor(const std::string& name) const {
  for (const auto& [n, values] : tensors) {
    if (n == name) return &values;
  }
  return nullptr;
}

StatusOr<std::string> EncodeState(const TrainingState& state, std::string_view key) {
  nlohmann::json header;
  uint64_t data_bytes = 0;
  std::set<std::string> names;
  try {
    header["fingerprint"] = state.fingerprint;
    header["epoch"] = state.epoch;
    header["step"] = state.step;
    header["optimizer_iterations"] = state.optimizer_iterations;
    header["seed"] = state.seed;
    header["extra"] = state.extra;
    header["tensors"] = nlohmann::json::array();
    for (const auto& [name, values] : state.tensors) {
      if (!names.insert(name).second) {
        return Status::Error("encoding checkpoint: tensor \"" + name + "\" appears twice");
      }
      header["tensors"].push_back({{"name", name}, {"count", values.size()}});
      data_bytes += values.size() * sizeof(float);
    }
    header["data_bytes"] = data_bytes;
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(std::string("encoding checkpoint header: ") + e.what());
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(std::string("encoding checkpoint header: ") + e.what());
  }

  std::string out;
  out.reserve(kFixedSize + header_text.size() + data_bytes + kTrailerSize);
  out.append(kStateFileMagic, kMagicSize);
  AppendLittleEndian<uint32_t>(out, kStateFileVersion);
  AppendLittleEndian<uint64_t>(out, header_text.size());
  out += header_text;
  for (const auto& [name, values] : state.tensors) AppendFloats(out, values);
  const Digest digest = Sha256Of(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  StatusOr<Digest> mac = VolumeMac(key, out.data(), out.size());
  if (!mac.ok()) return mac.status().WithContext("authenticating checkpoint");
  out.append(reinterpret_cast<const char*>(mac->data()), mac->size());
  return out;
}

StatusOr<TrainingState> DecodeState(const std::string& bytes, const std::string& source,
                                    std::string_view key) {
  auto error = [&](const std::string& what) { return Status::Error(source + ": " + what); };
  const size_t size = bytes.size();
  if (size == 0) return error("empty file (0 bytes): truncated, the write never completed");
  const size_t magic_seen = std::min(size, kMagicSize);
  if (std::memcmp(bytes.data(), kStateFileMagic, magic_seen) != 0) {
    return error("not a tj-trainer checkpoint (bad magic)");
  }
  if (size < kFixedSize) {
    return error("truncated: " + std::to_string(size) + " bytes, shorter than the " +
                 std::to_string(kFixedSize) + "-byte preamble");
  }
  const uint32_t version = LoadLittleEndian<uint32_t>(bytes, kMagicSize);
  if (version == 1) {
    return error(
        "format 1, written by a tj-trainer before state files were authenticated with the "
        "job's key: it cannot be shown to be this job's, so it is not read. Finish the run with "
        "the tj-trainer release that wrote it, or remove the file to start over");
  }
  if (version != kStateFileVersion) {
    return error("unsupported version " + std::to_string(version) +
                 " (this tj-trainer reads version " + std::to_string(kStateFileVersion) +
                 "; written by another release, or corrupt)");
  }
  if (size > kMaxStateFileBytes) {
    return error("too large: " + std::to_string(size) + " bytes, more than the " +
                 std::to_string(kMaxStateFileBytes) + " of any state this trainer writes");
  }
  const uint64_t header_len = LoadLittleEndian<uint64_t>(bytes, kMagicSize + 4);
  const bool header_fits = header_len <= size && kFixedSize + header_len + kTrailerSize <= size;

  // The digest decides whether the bytes are as written. On a mismatch nothing is
  // authenticated, so nothing of the header is parsed or believed: the file's size against
  // the preamble's header length is all that words the error.
  bool digest_ok = false;
  if (size >= kFixedSize + kTrailerSize) {
    const size_t at = size - kTrailerSize;
    const Digest digest = Sha256Of(bytes.data(), at);
    digest_ok = std::memcmp(digest.data(), bytes.data() + at, kDigestSize) == 0;
  }
  if (!digest_ok) {
    if (!header_fits) {
      return error("truncated: the header length says " + std::to_string(header_len) +
                   " bytes but the file has " + std::to_string(size) + " bytes in all");
    }
    return error(
        "digest mismatch: the file is corrupt, or was truncated or torn (its SHA-256 "
        "does not match; " +
        std::to_string(size) + " bytes, nothing of it read)");
  }
  // Intact; now whether this job's key wrote it. Nothing is parsed before this check.
  StatusOr<Digest> mac = VolumeMac(key, bytes.data(), size - kDigestSize);
  if (!mac.ok()) return mac.status().WithContext(source);
  if (CRYPTO_memcmp(mac->data(), bytes.data() + size - kDigestSize, kDigestSize) != 0) {
    return Status::Error(
        StatusCode::kPermissionDenied,
        source +
            ": not signed with this job's key (TJ_RENDEZVOUS_KEY): another job's file, one "
            "written by someone without the key (planted on the shared volume), or one written "
            "before the job's rendezvous Secret was made again with a new key; it is not read");
  }

  // Intact as written; anything wrong now was wrong when it was written.
  if (!header_fits) return error("malformed header: its length exceeds the file");
  StatusOr<Header> header = ParseHeader(bytes.substr(kFixedSize, header_len));
  if (!header.ok()) return header.status().WithContext(source);
  uint64_t sum = 0;
  for (const auto& [name, count] : header->tensors) {
    if (count > (size / sizeof(float))) {
      return error("tensor sizes do not match the file: \"" + name + "\" claims " +
                   std::to_string(count) + " values");
    }
    sum += count * sizeof(float);
  }
  const uint64_t data_bytes = size - kFixedSize - header_len - kTrailerSize;
  if (sum != header->data_bytes || sum != data_bytes) {
    return error("tensor sizes do not match the file: tensors hold " + std::to_string(sum) +
                 " bytes, header says " + std::to_string(header->data_bytes) + ", file has " +
                 std::to_string(data_bytes));
  }

  TrainingState state;
  try {
    const nlohmann::json& j = header->json;
    state.fingerprint = j.value("fingerprint", nlohmann::json());
    state.epoch = j.at("epoch").get<int64_t>();
    state.step = j.at("step").get<int64_t>();
    state.optimizer_iterations = j.at("optimizer_iterations").get<int64_t>();
    state.seed = j.at("seed").get<uint64_t>();
    state.extra = j.value("extra", nlohmann::json());
  } catch (const nlohmann::json::exception& e) {
    return error(std::string("malformed header: ") + e.what());
  }
  size_t offset = kFixedSize + header_len;
  state.tensors.reserve(header->tensors.size());
  for (const auto& [name, count] : header->tensors) {
    state.tensors.emplace_back(name, std::vector<float>());
    ReadFloats(bytes, offset, count, state.tensors.back().second);
    offset += count * sizeof(float);
  }
  return state;
}

Status WriteStateFile(const std::string& path, const TrainingState& state, std::string_view key,
                      std::string_view before_rename_failpoint) {
  StatusOr<std::string> bytes = EncodeState(state, key);
  if (!bytes.ok()) return bytes.status().WithContext("writing " + path);
  return WriteFileAtomically(path, *bytes, before_rename_failpoint);
}

StatusOr<TrainingState> ReadStateFile(const std::string& path, std::string_view key) {
  StatusOr<std::optional<std::string>> bytes = ReadVolumeFile(path, kMaxStateFileBytes);
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) return Status::Error(path + ": missing (no such file)");
  return DecodeState(**bytes, path, key);
}

std::optional<std::string> DescribeMismatch(const nlohmann::json& expected,
                                            const nlohmann::json& found) {
  std::vector<std::string> diffs;
  Diff(expected, found, "", diffs);
  if (diffs.empty()) return std::nullopt;
  std::string out;
  for (const std::string& d : diffs) out += (out.empty() ? "" : "; ") + d;
  return out;
}

}  // namespace tj::checkpoint
