// TensorBoard event files written without TensorFlow: TFRecord framing around hand-encoded
// Event protobufs holding scalar summaries, so `tensorboard --logdir` shows the curves.
// The reader parses the same files back and checks every CRC (tests, `tj-trainer` checks).
//
// TFRecord: uint64 length, uint32 masked CRC-32C of the length's 8 bytes, `length` bytes of
// data, uint32 masked CRC-32C of the data (little-endian).
// Event: wall_time (double, field 1), step (int64, field 2), file_version (string, field 3;
// "brain.Event:2" in the first record), summary (field 5) = Summary{repeated Value value = 1},
// Value{tag string = 1, simple_value float = 2}.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace tj::observe {

// Seconds since the Unix epoch; injectable so tests control wall_time and the file name.
using WallClockFn = std::function<double()>;
double SystemWallSeconds();

class ScalarWriter {
 public:
  // Creates `dir` if needed and the file events.out.tfevents.<secs>.<hostname> in it (with a
  // ".<n>" suffix when that name is taken), and writes the file_version record.
  static StatusOr<std::unique_ptr<ScalarWriter>> Open(const std::string& dir,
                                                      WallClockFn now = SystemWallSeconds);
  ~ScalarWriter();
  ScalarWriter(const ScalarWriter&) = delete;
  ScalarWriter& operator=(const ScalarWriter&) = delete;

  // Appends one Event holding one scalar. Buffered until Flush(). Thread-safe.
  Status WriteScalar(const std::string& tag, int64_t step, float value);
  // Makes everything written so far visible to readers (fflush; not fsync).
  Status Flush();

  const std::string& path() const { return path_; }

 private:
  ScalarWriter(std::string path, FILE* file, WallClockFn now);
  Status WriteRecord(const std::string& data) TJ_REQUIRES(mu_);

  const std::string path_;
  WallClockFn now_;
  Mutex mu_;
  FILE* file_ TJ_GUARDED_BY(mu_);
};

// ---- Reading back.

struct ScalarValue {
  std::string tag;
  float value = 0;
};

struct TensorBoardEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;  // set in the first record only
  std::vector<ScalarValue> scalars;
};

// Parses every record of an event file, verifying both CRCs of each and decoding the Event.
// Errors name the file, the record index and byte offset, and what is wrong.
StatusOr<std::vector<TensorBoardEvent>> ReadEventFile(const std::string& path);

// Same, from bytes already in memory (`source` names them in errors).
StatusOr<std::vector<TensorBoardEvent>> ParseEventRecords(const std::string& bytes,
                                                          const std::string& source);

// The event files (names containing "tfevents") directly in `dir`, sorted by name.
StatusOr<std::vector<std::string>> ListEventFiles(const std::string& dir);

// Encodes one Event (exposed for tests).
std::string EncodeScalarEvent(double wall_time, int64_t step, const std::string& tag, float value);
std::string EncodeFileVersionEvent(double wall_time);
// Wraps `data` in TFRecord framing (exposed for tests).
std::string FrameRecord(const std::string& data);

}  // namespace tj::observe
