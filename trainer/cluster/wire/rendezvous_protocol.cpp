#include "trainer/cluster/wire/rendezvous_protocol.h"

#include <algorithm>

#include "trainer/cluster/wire/wire_codec.h"

namespace tj::cluster {
namespace {

constexpr std::string_view kMagic = "TJRV";
constexpr uint32_t kMaxKeys = 1 << 16;
constexpr auto kMaxWait = std::chrono::hours(24);

StatusOr<Mac> TranscriptMac(std::string_view key, std::string_view label,
                            const HandshakeTranscript& t) {
  WireWriter m;
  m.Str(label)
      .Bytes(t.server_nonce)
      .Bytes(t.client_nonce)
      .Str(t.client_task)
      .Str(t.chief_task)
      .I64(t.gang);
  return MacOf(key, m.bytes());
}

// A message's tag: HMAC(session_key, direction || u64 sequence || body).
StatusOr<Mac> FrameTag(const Mac& session_key, char direction, uint64_t sequence,
                       std::string_view body) {
  WireWriter signed_part;
  signed_part.U8(static_cast<uint8_t>(direction)).U64(sequence).Bytes(body);
  StatusOr<Mac> tag = MacOf(MacBytes(session_key), signed_part.bytes());
  if (!tag.ok()) return tag.status().WithContext("authenticating a rendezvous message");
  return tag;
}

Status BadReply() { return Status::Error("bad reply"); }

}  // namespace

StatusOr<Mac> ClientProof(std::string_view key, const HandshakeTranscript& t) {
  return TranscriptMac(key, "TJRV3 client proof", t);
}

StatusOr<Mac> ServerProof(std::string_view key, const HandshakeTranscript& t) {
  return TranscriptMac(key, "TJRV3 server proof", t);
}

StatusOr<Mac> SessionKey(std::string_view key, const HandshakeTranscript& t) {
  return TranscriptMac(key, "TJRV3 session key", t);
}

StatusOr<Mac> OtherGangProof(std::string_view key, const HandshakeTranscript& t) {
  return TranscriptMac(key, "TJRV3 other gang", t);
}

std::string RendezvousServerHello(const Nonce& nonce) {
  WireWriter hello;
  hello.Bytes(kMagic).U8(kRendezvousVersion).Bytes(nonce);
  return hello.Take();
}

StatusOr<Nonce> ParseRendezvousServerHello(std::string_view hello) {
  WireReader in(hello);
  uint8_t version = 0;
  Nonce nonce{};
  if (!in.Matches(kMagic) || !in.U8(&version) || version != kRendezvousVersion ||
      !in.Bytes(&nonce)) {
    return Status::Error("it does not speak the tj-trainer rendezvous protocol (version " +
                         std::to_string(kRendezvousVersion) +
                         "); is TF_CONFIG's chief address right, and every task of the job "
                         "on the same tj-trainer image?");
  }
  return nonce;
}

std::string EncodeClientHello(const RendezvousClientHello& hello) {
  WireWriter out;
  out.Bytes(kMagic)
      .U8(kRendezvousVersion)
      .Str(hello.task)
      .I64(hello.gang)
      .Bytes(hello.client_nonce)
      .Bytes(hello.proof);
  return out.Take();
}

ClientHelloCheck CheckRendezvousClientHello(std::string_view received) {
  ClientHelloCheck c;
  WireReader in(received);
  if (!in.Matches(kMagic)) {
    if (!in.short_input()) {
      c.refusal = Status::Error("not a tj-trainer rendezvous client (bad magic)");
    }
    return c;
  }
  uint8_t version = 0;
  if (!in.U8(&version)) return c;
  if (version != kRendezvousVersion) {
    c.refusal = Status::Error("speaks rendezvous protocol version " + std::to_string(version) +
                              ", this chief version " + std::to_string(kRendezvousVersion));
    return c;
  }
  RendezvousClientHello& h = c.hello;
  if (!in.Str(&h.task, kMaxTaskName) || !in.I64(&h.gang) || !in.Bytes(&h.client_nonce) ||
      !in.Bytes(&h.proof)) {
    if (!in.short_input()) c.refusal = Status::Error("reading the client's hello: " + in.Error());
    return c;
  }
  if (!in.at_end()) {
    c.refusal = Status::Error("sent more than a hello before the verdict");
    return c;
  }
  c.complete = true;
  return c;
}

std::string AcceptedVerdict(const Mac& server_proof) {
  WireWriter verdict;
  verdict.U8(static_cast<uint8_t>(Verdict::kAccepted)).Bytes(server_proof);
  return verdict.Take();
}

std::string RefusedVerdict(std::string_view reason) {
  WireWriter verdict;
  verdict.U8(static_cast<uint8_t>(Verdict::kRefused)).Str(reason);
  return verdict.Take();
}

std::string OtherGangVerdict(int64_t chief_gang, const Mac& proof) {
  WireWriter verdict;
  verdict.U8(static_cast<uint8_t>(Verdict::kOtherGang)).I64(chief_gang).Bytes(proof);
  return verdict.Take();
}

OtherGang ParseOtherGang(std::string_view bytes) {
  WireReader in(bytes);
  OtherGang g;
  (void)(in.I64(&g.chief_gang) && in.Bytes(&g.proof));  // short: a gang and proof of zeros
  return g;
}

std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

StatusOr<std::string> SealFrame(const Mac& session_key, char direction, uint64_t sequence,
                                std::string_view body) {
  StatusOr<Mac> tag = FrameTag(session_key, direction, sequence, body);
  if (!tag.ok()) return tag.status();
  WireWriter frame;
  frame.Str(body).Bytes(*tag);
  return frame.Take();
}

Status CheckFrameTag(const Mac& session_key, char direction, uint64_t sequence,
                     std::string_view body, const Mac& tag) {
  StatusOr<Mac> expected = FrameTag(session_key, direction, sequence, body);
  if (!expected.ok()) return expected.status();
  if (!MacEquals(*expected, tag)) {
    return Status::Error(StatusCode::kPermissionDenied,
                         "message not authenticated by the session's key (tampered with, "
                         "replayed or injected); closed");
  }
  return Status::Ok();
}

std::string EncodeRequest(const Request& request) {
  WireWriter out;
  out.U8(static_cast<uint8_t>(request.op));
  switch (request.op) {
    case Op::kSet:
      out.Str(request.key).Str(request.value);
      break;
    case Op::kGet:
      out.Str(request.key);
      break;
    case Op::kWait:
      out.U32(static_cast<uint32_t>(request.keys.size()));
      for (const auto& k : request.keys) out.Str(k);
      out.U64(static_cast<uint64_t>(std::max<int64_t>(0, request.timeout.count())));
      break;
  }
  return out.Take();
}

StatusOr<Request> ParseRequest(std::string_view body) {
  WireReader in(body);
  auto malformed = [&] { return Status::Error("malformed request: " + in.Error() + "; closed"); };
  Request r;
  uint8_t op = 0;
  if (!in.U8(&op)) return malformed();
  r.op = static_cast<Op>(op);
  if (r.op == Op::kSet) {
    if (!in.Str(&r.key, kMaxRendezvousString) || !in.Str(&r.value, kMaxRendezvousString)) {
      return malformed();
    }
  } else if (r.op == Op::kGet) {
    if (!in.Str(&r.key, kMaxRendezvousString)) return malformed();
  } else if (r.op == Op::kWait) {
    uint32_t n = 0;
    if (!in.U32(&n)) return malformed();
    if (n > kMaxKeys) return Status::Error("too many keys in a wait request");
    for (uint32_t i = 0; i < n; ++i) {
      if (!in.Str(&r.keys.emplace_back(), kMaxRendezvousString)) return malformed();
    }
    uint64_t timeout_ms = 0;
    if (!in.U64(&timeout_ms)) return malformed();
    r.timeout = std::chrono::milliseconds(std::min<uint64_t>(
        timeout_ms, std::chrono::duration_cast<std::chrono::milliseconds>(kMaxWait).count()));
  } else {
    return Status::Error("unknown request " + std::to_string(op) + "; closed");
  }
  if (!in.at_end()) return Status::Error("request longer than its fields; closed");
  return r;
}

std::string SetReply() { return std::string(1, '\0'); }

std::string GetReply(const StatusOr<std::string>& value) {
  WireWriter out;
  out.U8(value.ok() ? 1 : 0).Str(value.ok() ? *value : "");
  return out.Take();
}

std::string WaitReply(bool all_set) { return std::string(1, all_set ? '\0' : '\1'); }

Status ParseSetReply(std::string_view body) {
  WireReader in(body);
  uint8_t ack = 1;
  if (!in.U8(&ack) || !in.at_end() || ack != 0) return BadReply();
  return Status::Ok();
}

StatusOr<GetResult> ParseGetReply(std::string_view body) {
  WireReader in(body);
  uint8_t found = 0;
  GetResult r;
  if (!in.U8(&found) || !in.Str(&r.value, kMaxRendezvousString) || !in.at_end()) {
    return BadReply();
  }
  r.found = found != 0;
  return r;
}

StatusOr<bool> ParseWaitReply(std::string_view body) {
  WireReader in(body);
  uint8_t result = 1;
  if (!in.U8(&result) || !in.at_end()) return BadReply();
  return result == 0;
}

}  // namespace tj::cluster
