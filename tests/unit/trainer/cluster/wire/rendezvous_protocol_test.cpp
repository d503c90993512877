// The rendezvous's messages, byte for byte as version 3 has them on the wire (other versions
// of the trainer speak it: the bytes are written out here by hand, not with the codec), and
// what the server makes of a client's hello and requests as they arrive.
#include "trainer/cluster/wire/rendezvous_protocol.h"

#include <gtest/gtest.h>

#include <string>

namespace tj::cluster {
namespace {

using namespace std::string_literals;
using std::chrono::milliseconds;

template <size_t N>
std::string Raw(const std::array<uint8_t, N>& a) {
  return std::string(reinterpret_cast<const char*>(a.data()), N);
}

Mac SomeMac(uint8_t first) {
  Mac m{};
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint8_t>(first + i);
  return m;
}

RendezvousClientHello SomeHello() {
  RendezvousClientHello h;
  h.task = "worker 1";
  h.gang = 2;
  h.client_nonce = SomeMac(100);
  h.proof = SomeMac(200);
  return h;
}

TEST(RendezvousMessages, AreVersionThreeByteForByte) {
  const Nonce nonce = SomeMac(1);
  EXPECT_EQ(RendezvousServerHello(nonce), "TJRV\x03"s + Raw(nonce));
  EXPECT_EQ(*ParseRendezvousServerHello("TJRV\x03"s + Raw(nonce)), nonce);
  EXPECT_FALSE(ParseRendezvousServerHello("TJRV\x02"s + Raw(nonce)).ok());
  EXPECT_EQ(EncodeClientHello(SomeHello()),
            "TJRV\x03"
            "\x00\x00\x00\x08"
            "worker 1"
            "\x00\x00\x00\x00\x00\x00\x00\x02"s +
                Raw(SomeMac(100)) + Raw(SomeMac(200)));
  const Mac proof = SomeMac(9);
  EXPECT_EQ(AcceptedVerdict(proof), "\x00"s + Raw(proof));
  EXPECT_EQ(RefusedVerdict("no"), "\x01\x00\x00\x00\x02no"s);
  const std::string other = OtherGangVerdict(-1, proof);
  EXPECT_EQ(other, "\x02\xff\xff\xff\xff\xff\xff\xff\xff"s + Raw(proof));
  const OtherGang parsed = ParseOtherGang(std::string_view{other}.substr(1));
  EXPECT_EQ(parsed.chief_gang, -1);
  EXPECT_EQ(parsed.proof, proof);
  Request set;
  set.op = Op::kSet;
  set.key = "k";
  set.value = "vv";
  EXPECT_EQ(EncodeRequest(set), "\x01\x00\x00\x00\x01k\x00\x00\x00\x02vv"s);
  Request wait;
  wait.op = Op::kWait;
  wait.keys = {"a"};
  wait.timeout = milliseconds(258);
  EXPECT_EQ(EncodeRequest(wait),
            "\x03\x00\x00\x00\x01\x00\x00\x00\x01"
            "a\x00\x00\x00\x00\x00\x00\x01\x02"s);
  EXPECT_EQ(GetReply(std::string("v")), "\x01\x00\x00\x00\x01v"s);
  EXPECT_EQ(GetReply(Status::Error("not set")), "\x00\x00\x00\x00\x00"s);
  EXPECT_EQ(SetReply(), "\x00"s);
  EXPECT_EQ(WaitReply(false), "\x01"s);
}

TEST(RendezvousMessages, AFrameIsItsLengthBodyAndATagThatBindsDirectionAndSequence) {
  const Mac key = SomeMac(3);
  const std::string frame = *SealFrame(key, kFromClient, 7, "body");
  ASSERT_EQ(frame.size(), 4 + 4 + 32u);
  EXPECT_EQ(frame.substr(0, 8),
            "\x00\x00\x00\x04"
            "body"s);
  Mac tag{};
  std::copy(frame.begin() + 8, frame.end(), tag.begin());
  EXPECT_TRUE(CheckFrameTag(key, kFromClient, 7, "body", tag).ok());
  EXPECT_EQ(CheckFrameTag(key, kFromServer, 7, "body", tag).code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE(CheckFrameTag(key, kFromClient, 8, "body", tag).ok());
  EXPECT_FALSE(CheckFrameTag(key, kFromClient, 7, "bodY", tag).ok());
  EXPECT_FALSE(CheckFrameTag(SomeMac(4), kFromClient, 7, "body", tag).ok());
}

TEST(CheckRendezvousClientHello, WaitsForMoreRefusesGarbageAndOverlongNamesAtOnce) {
  const std::string hello = EncodeClientHello(SomeHello());
  for (size_t n = 0; n < hello.size(); ++n) {
    const ClientHelloCheck c = CheckRendezvousClientHello(hello.substr(0, n));
    EXPECT_TRUE(c.refusal.ok() && !c.complete) << n << ": " << c.refusal.message();
  }
  const ClientHelloCheck ok = CheckRendezvousClientHello(hello);
  ASSERT_TRUE(ok.refusal.ok() && ok.complete) << ok.refusal.message();
  EXPECT_EQ(ok.hello.task, "worker 1");
  EXPECT_EQ(ok.hello.gang, 2);
  EXPECT_EQ(ok.hello.proof, SomeMac(200));
  auto refusal = [](const std::string& in) {
    return CheckRendezvousClientHello(in).refusal.message();
  };
  EXPECT_EQ(refusal(hello + "x"), "sent more than a hello before the verdict");
  EXPECT_EQ(refusal("GET "), "not a tj-trainer rendezvous client (bad magic)");
  EXPECT_EQ(refusal("TJRV\x02"), "speaks rendezvous protocol version 2, this chief version 3");
  // A name longer than 256 is refused from its length, before a byte of it arrives.
  EXPECT_EQ(refusal("TJRV\x03\x00\x00\x01\x01"s),
            "reading the client's hello: string of 257 bytes too long");
}

TEST(ParseRequest, ReadsWhatTheClientEncodesAndRefusesTheRest) {
  Request wait;
  wait.op = Op::kWait;
  wait.keys = {"a", "b"};
  wait.timeout = milliseconds(1500);
  const StatusOr<Request> back = ParseRequest(EncodeRequest(wait));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->keys, wait.keys);
  EXPECT_EQ(back->timeout, milliseconds(1500));
  // A wait is capped at a day.
  wait.timeout = std::chrono::hours(1000);
  EXPECT_EQ(ParseRequest(EncodeRequest(wait))->timeout, std::chrono::hours(24));
  Request get;
  get.op = Op::kGet;
  get.key = "k";
  EXPECT_EQ(ParseRequest(EncodeRequest(get))->key, "k");
  EXPECT_EQ(ParseRequest(EncodeRequest(get) + "x").status().message(),
            "request longer than its fields; closed");
  EXPECT_EQ(ParseRequest("\x09"s).status().message(), "unknown request 9; closed");
  EXPECT_EQ(ParseRequest("\x02\x00\x00"s).status().message(),
            "malformed request: message truncated; closed");
  EXPECT_EQ(ParseRequest("\x03\x00\x01\x00\x01"s).status().message(),
            "too many keys in a wait request");
  EXPECT_EQ(ParseRequest("").status().message(), "malformed request: message truncated; closed");
}

TEST(ParseReplies, AcceptOnlyTheirOwnShape) {
  EXPECT_TRUE(ParseSetReply(SetReply()).ok());
  EXPECT_FALSE(ParseSetReply("\x01"s).ok());
  EXPECT_FALSE(ParseSetReply("\x00\x00"s).ok());
  const StatusOr<GetResult> got = ParseGetReply(GetReply(std::string("v")));
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->found);
  EXPECT_EQ(got->value, "v");
  EXPECT_FALSE(ParseGetReply("\x01\x00\x00\x00\x05v"s).ok());
  EXPECT_TRUE(*ParseWaitReply(WaitReply(true)));
  EXPECT_FALSE(*ParseWaitReply(WaitReply(false)));
  EXPECT_FALSE(ParseWaitReply("").ok());
}

}  // namespace
}  // namespace tj::cluster
