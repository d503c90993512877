#include "trainer/cluster/wire/link_protocol.h"

#include "trainer/cluster/wire/wire_codec.h"

namespace tj::cluster {
namespace {

constexpr std::string_view kMagic = "TJCH";
constexpr uint8_t kVersion = 1;

StatusOr<Mac> LinkMac(std::string_view key, std::string_view label, const LinkTranscript& t) {
  WireWriter m;
  m.Bytes(label)
      .U8(static_cast<uint8_t>(t.channel))
      .I64(t.gang)
      .U32(t.from_rank)
      .U32(t.to_rank)
      .Bytes(t.server_nonce)
      .Bytes(t.client_nonce);
  StatusOr<Mac> mac = MacOf(key, m.bytes());
  if (!mac.ok()) return mac.status().WithContext("authenticating a connection between tasks");
  return mac;
}

// The first bytes of a hello, as far as they arrived: magic, version, channel. An error as
// soon as one is wrong.
Status CheckPrefix(WireReader& in, Channel channel) {
  if (!in.Matches(kMagic)) {
    if (in.short_input()) return Status::Ok();
    return Status::Error("not a tj-trainer peer (bad magic)");
  }
  uint8_t version = 0, asked = 0;
  if (!in.U8(&version)) return Status::Ok();
  if (version != kVersion) {
    return Status::Error("speaks peer protocol version " + std::to_string(version) +
                         ", this task version " + std::to_string(kVersion));
  }
  if (!in.U8(&asked)) return Status::Ok();
  if (asked != static_cast<uint8_t>(channel)) {
    return Status::Error("asked for another channel than " + std::string(ChannelName(channel)));
  }
  return Status::Ok();
}

}  // namespace

const char* ChannelName(Channel channel) {
  switch (channel) {
    case Channel::kRing:
      return "all-reduce ring";
    case Channel::kHealth:
      return "peer health";
  }
  return "unknown";
}

StatusOr<Mac> LinkClientProof(std::string_view key, const LinkTranscript& t) {
  return LinkMac(key, "TJCH1 client proof", t);
}

StatusOr<Mac> LinkServerProof(std::string_view key, const LinkTranscript& t) {
  return LinkMac(key, "TJCH1 server proof", t);
}

std::string LinkServerHello(Channel channel, uint32_t rank, const Nonce& nonce) {
  WireWriter out;
  out.Bytes(kMagic).U8(kVersion).U8(static_cast<uint8_t>(channel)).U32(rank).Bytes(nonce);
  return out.Take();
}

StatusOr<ServerHelloCheck> CheckLinkServerHello(std::string_view hello, Channel channel) {
  WireReader in(hello);
  TJ_RETURN_IF_ERROR(CheckPrefix(in, channel));
  ServerHelloCheck c;
  if (!in.U32(&c.rank) || !in.Bytes(&c.nonce) || !in.at_end()) {
    return Status::Error("a server hello of " + std::to_string(hello.size()) + " bytes, not " +
                         std::to_string(kLinkServerHelloBytes));
  }
  return c;
}

StatusOr<std::string> LinkClientHello(std::string_view key, const LinkTranscript& t) {
  StatusOr<Mac> proof = LinkClientProof(key, t);
  if (!proof.ok()) return proof.status();
  WireWriter out;
  out.Bytes(kMagic)
      .U8(kVersion)
      .U8(static_cast<uint8_t>(t.channel))
      .U32(t.from_rank)
      .I64(t.gang)
      .Bytes(t.client_nonce)
      .Bytes(*proof);
  return out.Take();
}

HelloCheck CheckLinkClientHello(std::string_view received, const GangIdentity& self,
                                Channel channel, uint32_t own_rank, const Nonce& server_nonce) {
  HelloCheck c;
  WireReader in(received);
  c.refusal = CheckPrefix(in, channel);
  if (!c.refusal.ok()) return c;
  if (received.size() < kLinkClientHelloBytes) return c;
  if (received.size() > kLinkClientHelloBytes) {
    c.refusal = Status::Error("sent more than a hello before the answer");
    return c;
  }
  c.complete = true;
  Mac proof{};
  (void)(in.U32(&c.from_rank) && in.I64(&c.gang) && in.Bytes(&c.client_nonce) &&
         in.Bytes(&proof));  // all there: the size was checked
  LinkTranscript t;
  t.channel = channel;
  t.gang = self.gang;  // this task's: a proof for another gang does not verify
  t.from_rank = c.from_rank;
  t.to_rank = own_rank;
  t.server_nonce = server_nonce;
  t.client_nonce = c.client_nonce;
  StatusOr<Mac> expected = LinkClientProof(self.job_key, t);
  if (!expected.ok()) {
    c.refusal = expected.status();  // fail closed
  } else if (!MacEquals(*expected, proof)) {
    c.refusal = Status::Error(StatusCode::kPermissionDenied,
                              c.gang != self.gang
                                  ? "claims gang " + std::to_string(c.gang) +
                                        ", this task is of gang " + std::to_string(self.gang) +
                                        " (and the proof does not verify for it)"
                                  : "does not prove it holds TJ_RENDEZVOUS_KEY (wrong proof)");
  }
  return c;
}

}  // namespace tj::cluster
