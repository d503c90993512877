// SecureRandomHex: the job's rendezvous key and the handshakes' nonces come from getrandom(2).
#include "common/secure_random.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace tj {
namespace {

TEST(SecureRandomHex, TwoLowercaseHexDigitsPerByte) {
  for (const size_t bytes : {0, 1, 16, 32, 4096}) {
    auto hex = SecureRandomHex(bytes);
    ASSERT_TRUE(hex.ok()) << hex.status().message();
    EXPECT_EQ(hex->size(), 2 * bytes);
    EXPECT_EQ(hex->find_first_not_of("0123456789abcdef"), std::string::npos) << *hex;
  }
}

TEST(SecureRandomHex, DrawsDifferAndUseEveryDigit) {
  std::set<std::string> keys;
  std::set<char> digits;
  for (int i = 0; i < 64; ++i) {
    auto hex = SecureRandomHex(32);
    ASSERT_TRUE(hex.ok()) << hex.status().message();
    keys.insert(*hex);
    digits.insert(hex->begin(), hex->end());
  }
  EXPECT_EQ(keys.size(), 64U) << "64 draws of 256 bits repeat";
  EXPECT_EQ(digits.size(), 16U) << "4,096 digits never showed every hex digit";
}

}  // namespace
}  // namespace tj
