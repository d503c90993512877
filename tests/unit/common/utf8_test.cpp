// Utf8Prefix cuts foreign text at a character boundary; DumpSafe writes JSON of text that is
// not UTF-8 without throwing.
#include "common/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace tj {
namespace {

TEST(Utf8Prefix, KeepsShortTextWhole) {
  EXPECT_EQ(Utf8Prefix("abc", 3), "abc");
  EXPECT_EQ(Utf8Prefix("", 0), "");
}

TEST(Utf8Prefix, CutsBeforeACharacterThatDoesNotFit) {
  const std::string e = "\u00e9";          // 2 bytes
  const std::string euro = "\u20ac";       // 3 bytes
  const std::string emoji = "\U0001F600";  // 4 bytes
  EXPECT_EQ(Utf8Prefix("a" + e, 2), "a");
  EXPECT_EQ(Utf8Prefix("a" + e, 3), "a" + e);
  EXPECT_EQ(Utf8Prefix(euro + euro, 5), euro);
  EXPECT_EQ(Utf8Prefix(emoji, 3), "");
  EXPECT_EQ(Utf8Prefix("ab" + emoji + "c", 6), "ab" + emoji);
  for (size_t n = 0; n <= 8; ++n) {
    EXPECT_NO_THROW((void)nlohmann::json(Utf8Prefix(euro + emoji + e, n)).dump()) << n;
  }
}

TEST(DumpSafe, WritesInvalidBytesAsReplacementCharacters) {
  const nlohmann::json j = {{"m", std::string("a\xC3", 2)}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);
  EXPECT_EQ(DumpSafe(j), "{\"m\":\"a\xEF\xBF\xBD\"}");
}

}  // namespace
}  // namespace tj
