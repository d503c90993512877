// Fuzz target: CheckLinkClientHello (trainer/cluster/wire/link_protocol.h), what a ring or
// peer-health port makes of the bytes a connection sends before it is authenticated. Every
// prefix of the input is checked as the acceptor checks what has arrived so far: any bytes
// give "wait for more", a refusal with a reason, or an acceptance, never a crash; an acceptance
// only for exactly the hello a holder of the key makes for this port, gang and nonce.
#include <cstdint>
#include <string_view>

#include "tests/fuzz/fuzz_check.h"
#include "trainer/cluster/wire/link_protocol.h"

using tj::cluster::Channel;
using tj::cluster::CheckLinkClientHello;
using tj::cluster::HelloCheck;
using tj::cluster::kLinkClientHelloBytes;
using tj::cluster::LinkClientHello;
using tj::cluster::LinkTranscript;
using tj::cluster::Nonce;

namespace {
// make_seeds.py computes its valid hello with the same values.
constexpr char kKey[] = "fuzz-link-key";
constexpr int64_t kGang = 3;
constexpr uint32_t kOwnRank = 1;
Nonce ServerNonce() {
  Nonce n{};
  for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<uint8_t>(i + 1);
  return n;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const Nonce server_nonce = ServerNonce();
  const tj::cluster::GangIdentity self{.gang = kGang, .job_key = kKey};
  for (size_t n = 0; n <= in.size() && n <= kLinkClientHelloBytes + 1; ++n) {
    const std::string_view part = in.substr(0, n);
    const HelloCheck c = CheckLinkClientHello(part, self, Channel::kRing, kOwnRank, server_nonce);
    if (!c.refusal.ok()) {
      TJ_FUZZ_CHECK(!c.refusal.message().empty());
      continue;
    }
    if (!c.complete) {
      TJ_FUZZ_CHECK(n < kLinkClientHelloBytes);
      continue;
    }
    TJ_FUZZ_CHECK(n == kLinkClientHelloBytes);
    LinkTranscript t;
    t.channel = Channel::kRing;
    t.gang = kGang;
    t.from_rank = c.from_rank;
    t.to_rank = kOwnRank;
    t.server_nonce = server_nonce;
    for (size_t i = 0; i < t.client_nonce.size(); ++i) {
      t.client_nonce[i] = static_cast<uint8_t>(part[18 + i]);
    }
    const tj::StatusOr<std::string> expected = LinkClientHello(kKey, t);
    TJ_FUZZ_CHECK(expected.ok() && *expected == part);
    TJ_FUZZ_CHECK(c.gang == kGang);
  }
  return 0;
}
