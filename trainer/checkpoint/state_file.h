// The trainer's checkpoint file: everything needed to resume training exactly (weights,
// optimizer state, counters, seed) plus a fingerprint of the configuration that wrote it.
// Backups and per-epoch checkpoints share this format.
//
// Layout (all integers little-endian):
//   offset 0   8 bytes   magic "TJCKPT\r\n"
//          8   uint32    format version (kStateFileVersion)
//         12   uint64    header length H
//         20   H bytes   header: UTF-8 JSON {"fingerprint", "epoch", "step",
//                        "optimizer_iterations", "seed", "extra",
//                        "tensors": [{"name", "count"}...], "data_bytes"}
//     20 + H   D bytes   the tensors' float32 values, in header order, no padding
//  20 + H + D  32 bytes  SHA-256 of every byte before it (integrity: torn, truncated, flipped)
//  52 + H + D  32 bytes  HMAC-SHA256 under the job's key of every byte before it (authenticity)
//
// A state file lies on a volume that others may write. Nothing of it is parsed before both
// trailers check out (a digest mismatch is reported from the file's size alone), and then only
// within bounds (kMaxStateFileBytes, kMaxStateHeaderBytes, kMaxStateHeaderNesting). The key is the
// job's rendezvous key (TJ_RENDEZVOUS_KEY: made once per job, the same for every gang); an empty
// key (a run by hand, an exported model) gives integrity only. Format 1 (a SHA-256 alone, before
// files were authenticated) is refused.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tj::checkpoint {

inline constexpr char kStateFileMagic[8] = {'T', 'J', 'C', 'K', 'P', 'T', '\r', '\n'};
inline constexpr uint32_t kStateFileVersion = 2;
// Bounds on what is read: the largest state this trainer writes is 4.2 MB (weights and Adam's
// two moments) with a header under 1 KiB nested 3 deep.
inline constexpr size_t kMaxStateFileBytes = size_t{64} << 20;
inline constexpr size_t kMaxStateHeaderBytes = size_t{1} << 20;
inline constexpr size_t kMaxStateHeaderNesting = 16;

struct TrainingState {
  nlohmann::json fingerprint;  // configuration: model, batch size, number of workers, dataset...
  int64_t epoch = 0;           // epochs fully completed
  int64_t step = 0;            // steps completed within epoch+1; 0 at an epoch boundary
  int64_t optimizer_iterations = 0;
  uint64_t seed = 0;
  nlohmann::json extra;  // loop counters (running loss sums etc.), opaque to this module
  std::vector<std::pair<std::string, std::vector<float>>> tensors;  // e.g. weights, adam_m

  // The tensor called `name`, or nullptr.
  const std::vector<float>* FindTensor(const std::string& name) const;
  bool operator==(const TrainingState&) const = default;
};

// The file's bytes for `state`, authenticated under `key`. Fails on a header nlohmann/json
// cannot serialise (invalid UTF-8 in a string), on duplicate tensor names, or when the HMAC
// cannot be computed.
StatusOr<std::string> EncodeState(const TrainingState& state, std::string_view key);

// Parses bytes produced by EncodeState under the same `key`. `source` names them in error
// messages (a path). Every error names the problem: "truncated", "not a tj-trainer
// checkpoint", "unsupported version", "format 1", "digest mismatch", "not signed with this
// job's key" (StatusCode::kPermissionDenied: intact, but under another key), "too large",
// "malformed header", "tensor sizes".
StatusOr<TrainingState> DecodeState(const std::string& bytes, const std::string& source,
                                    std::string_view key);

// Encodes under `key` and writes atomically and durably (temporary file, fsync, rename, fsync
// of the directory). The directory must exist.
// `before_rename_failpoint`: see WriteFileAtomically.
Status WriteStateFile(const std::string& path, const TrainingState& state, std::string_view key,
                      std::string_view before_rename_failpoint = {});

// Reads and verifies a file written by WriteStateFile under `key` (ReadVolumeFile: a FIFO, a
// directory, a symbolic link, a device, or a file larger than kMaxStateFileBytes is refused
// unread, never waited on). A missing file is an error that says "missing" (callers that
// expect absence check first).
StatusOr<TrainingState> ReadStateFile(const std::string& path, std::string_view key);

// Compares two configuration fingerprints field by field (nested objects as "a.b").
// Returns nullopt when equal, else one clause per differing field, joined by "; ":
//   "batch_size: backup has 32, this run has 64".
// `expected` is this run's fingerprint, `found` the backup's.
std::optional<std::string> DescribeMismatch(const nlohmann::json& expected,
                                            const nlohmann::json& found);

}  // namespace tj::checkpoint
