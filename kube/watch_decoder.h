// Decodes a watch stream: newline-delimited JSON objects {"type": ..., "object": ...} that
// arrive in arbitrary chunks. Pure, so it is unit-tested on hand-made chunkings.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kube/api_error.h"

namespace tj::kube {

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kAdded;
  nlohmann::json object;  // the object; for kError a metav1.Status

  // For kError: the Status as an ApiError (code 410, reason Expired for a too old version).
  ApiError AsError() const;
  // metadata.resourceVersion of the object ("" when absent).
  std::string ResourceVersion() const;
};

const char* ToString(WatchEvent::Type type);

class WatchDecoder {
 public:
  // Feeds bytes; calls `on_event` for each complete line. A line that is not a watch event
  // yields an ApiError (code 0) through `on_bad_line` and is skipped. Returns false when a
  // callback returned false (stop).
  bool Feed(std::string_view bytes, const std::function<bool(WatchEvent&)>& on_event,
            const std::function<void(const ApiError&)>& on_bad_line);
  size_t buffered() const { return partial_.size(); }

 private:
  std::string partial_;
};

// Parses one line of a watch stream. The object's metadata.managedFields (server-side apply's
// bookkeeping, often half of a pod's bytes; nothing in this client reads it) is skipped while
// parsing, not built and then thrown away.
Result<WatchEvent> ParseWatchEvent(std::string_view line);

}  // namespace tj::kube
