// How deep a JSON text nests, measured without parsing it: for text that someone else wrote
// (a tenant's /status or log line, a state file on a shared volume), so that neither a parser
// nor the destructor or comparison of what it built recurses as deep as the writer likes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace tj {

// The deepest nesting of objects and arrays in `text` (strings skipped): "{}" is 1,
// "{\"a\":[1]}" is 2, "42" is 0. Malformed text gives a number too, never an error.
inline size_t JsonNesting(std::string_view text) {
  size_t depth = 0, max = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max = std::max(max, ++depth);
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return max;
}

}  // namespace tj
