#include "trainer/checkpoint/numbered_name.h"

#include <charconv>
#include <system_error>

namespace tj::checkpoint {

std::string NumberedName(std::string_view prefix, int64_t n) {
  return std::string(prefix) + std::to_string(n);
}

std::optional<int64_t> ParseNumberedName(std::string_view name, std::string_view prefix) {
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) {
    return std::nullopt;
  }
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  if (*first < '0' || *first > '9') return std::nullopt;  // no sign, no blank
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(first, last, n);
  if (ec != std::errc() || ptr != last) return std::nullopt;
  return n;
}

}  // namespace tj::checkpoint
