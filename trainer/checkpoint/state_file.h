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
//  20 + H + D  32 bytes  SHA-256 of every byte before it
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
inline constexpr uint32_t kStateFileVersion = 1;

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

// The file's bytes for `state`. Fails only on a header nlohmann/json cannot serialise
// (invalid UTF-8 in a string) or on duplicate tensor names.
StatusOr<std::string> EncodeState(const TrainingState& state);

// Parses bytes produced by EncodeState. `source` names them in error messages (a path).
// Every error names the problem: "truncated", "not a tj-trainer checkpoint",
// "unsupported version", "digest mismatch", "malformed header", "tensor sizes".
StatusOr<TrainingState> DecodeState(const std::string& bytes, const std::string& source);

// Encodes and writes atomically and durably (temporary file, fsync, rename, fsync of the
// directory). The directory must exist.
// `before_rename_failpoint`: see WriteFileAtomically.
Status WriteStateFile(const std::string& path, const TrainingState& state,
                      std::string_view before_rename_failpoint = {});

// Reads and verifies a file written by WriteStateFile. A missing file is an error that says
// "missing" (callers that expect absence check first).
StatusOr<TrainingState> ReadStateFile(const std::string& path);

// Compares two configuration fingerprints field by field (nested objects as "a.b").
// Returns nullopt when equal, else one clause per differing field, joined by "; ":
//   "batch_size: backup has 32, this run has 64".
// `expected` is this run's fingerprint, `found` the backup's.
std::optional<std::string> DescribeMismatch(const nlohmann::json& expected,
                                            const nlohmann::json& found);

}  // namespace tj::checkpoint
