// The codec of the wire protocols: the bytes it writes (big-endian, strings after their u32
// length), and a reader that never reads past its input, refuses a length over its maximum
// before copying anything, and tells "more may come" from "refused".
#include "trainer/cluster/wire/wire_codec.h"

#include <gtest/gtest.h>

#include <string>

namespace tj::cluster {
namespace {

using namespace std::string_literals;

TEST(WireWriter, WritesBigEndianIntegersAndLengthPrefixedStrings) {
  WireWriter w;
  w.U8(0x01).U32(0x02030405).U64(0x060708090a0b0c0d).I64(-2).Str("ab").Bytes("xy");
  EXPECT_EQ(w.bytes(),
            "\x01"
            "\x02\x03\x04\x05"
            "\x06\x07\x08\x09\x0a\x0b\x0c\x0d"
            "\xff\xff\xff\xff\xff\xff\xff\xfe"
            "\x00\x00\x00\x02"
            "ab"
            "xy"s);
  std::array<uint8_t, 3> a{7, 8, 9};
  EXPECT_EQ(WireWriter().Bytes(a).Take(), "\x07\x08\x09");
}

TEST(WireReader, ReadsBackWhatTheWriterWrote) {
  WireWriter w;
  w.U8(200).U32(70000).U64(1ull << 40).I64(-1).Str("task").Bytes("magic");
  WireReader r(w.bytes());
  uint8_t u8 = 0;
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  int64_t i64 = 0;
  std::string s;
  char magic[5];
  ASSERT_TRUE(r.U8(&u8) && r.U32(&u32) && r.U64(&u64) && r.I64(&i64) && r.Str(&s, 16) &&
              r.Bytes(magic, 5));
  EXPECT_EQ(u8, 200);
  EXPECT_EQ(u32, 70000u);
  EXPECT_EQ(u64, 1ull << 40);
  EXPECT_EQ(i64, -1);
  EXPECT_EQ(s, "task");
  EXPECT_EQ(std::string(magic, 5), "magic");
  EXPECT_TRUE(r.at_end());
}

TEST(WireReader, EveryShortInputIsShortNeverReadPast) {
  WireWriter w;
  w.U32(1).Str("value").U64(3);
  const std::string all = w.bytes();
  for (size_t n = 0; n < all.size(); ++n) {
    WireReader r(std::string_view{all}.substr(0, n));
    uint32_t a = 0;
    uint64_t c = 0;
    std::string b;
    EXPECT_FALSE(r.U32(&a) && r.Str(&b, 100) && r.U64(&c)) << n;
    EXPECT_TRUE(r.short_input()) << n;
    EXPECT_EQ(r.Error(), "message truncated");
  }
}

TEST(WireReader, ALengthOverItsMaximumIsRefusedBeforeAnythingIsCopied) {
  // Announces 64 MiB and sends 3 bytes: refused on the length alone, not "wait for more".
  const std::string in =
      "\x04\x00\x00\x00"
      "abc"s;
  WireReader r(in);
  std::string s;
  EXPECT_FALSE(r.Str(&s, 256));
  EXPECT_FALSE(r.short_input());
  EXPECT_EQ(r.Error(), "string of 67108864 bytes too long");
  EXPECT_TRUE(s.empty());
  WireReader frame(in);
  uint32_t n = 0;
  EXPECT_FALSE(frame.Length(&n, 1024));
  EXPECT_EQ(n, 64u << 20);
}

TEST(WireReader, MatchesALiteralAsItArrivesAndRefusesGarbageFromItsFirstByte) {
  for (const std::string_view prefix : {"", "T", "TJ", "TJR"}) {
    WireReader r(prefix);
    EXPECT_FALSE(r.Matches("TJRV"));
    EXPECT_TRUE(r.short_input()) << prefix;
  }
  WireReader garbage("G");
  EXPECT_FALSE(garbage.Matches("TJRV"));
  EXPECT_FALSE(garbage.short_input());
  WireReader late("TJRX");
  EXPECT_FALSE(late.Matches("TJRV"));
  EXPECT_FALSE(late.short_input());
  WireReader whole("TJRV\x03");
  uint8_t version = 0;
  EXPECT_TRUE(whole.Matches("TJRV") && whole.U8(&version) && whole.at_end());
  EXPECT_EQ(version, 3);
}

}  // namespace
}  // namespace tj::cluster
