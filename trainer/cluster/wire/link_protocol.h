// The messages of the handshake of every connection between the tasks of one gang (the
// all-reduce ring's and the peer-health probes'; net/link_handshake.h runs it on sockets). The
// connecting task proves it holds the job's key, for this gang, from the rank it claims, to
// the rank and channel it asks for; the accepting task proves the same back.
//
// Wire format, version 1 (on wire_codec.h: integers big-endian):
//   server hello:  "TJCH" u8 version u8 channel u32 server_rank nonce[32]            (42 bytes)
//   client hello:  "TJCH" u8 version u8 channel u32 from_rank i64 gang nonce[32] proof[32]
//                                                                                     (82 bytes)
//   server proof:  proof[32]           (accepted; the connection is the caller's from here)
// The server speaks first; the client answers in one message of a fixed size, so a wrong
// magic, version or channel shows as soon as its first bytes arrive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "trainer/cluster/config/gang_identity.h"
#include "trainer/cluster/wire/authentication.h"

namespace tj::cluster {

// What a connection is for: a proof for one channel does not open another.
enum class Channel : uint8_t { kRing = 1, kHealth = 2 };
const char* ChannelName(Channel channel);

// ---- The proofs (pure functions, exposed for tests).
struct LinkTranscript {
  Channel channel = Channel::kRing;
  int64_t gang = -1;
  uint32_t from_rank = 0;  // the connecting task's rank
  uint32_t to_rank = 0;    // the accepting task's rank
  Nonce server_nonce{};
  Nonce client_nonce{};
};
StatusOr<Mac> LinkClientProof(std::string_view key, const LinkTranscript& t);
StatusOr<Mac> LinkServerProof(std::string_view key, const LinkTranscript& t);

inline constexpr size_t kLinkServerHelloBytes = 4 + 1 + 1 + 4 + 32;
inline constexpr size_t kLinkClientHelloBytes = 4 + 1 + 1 + 4 + 8 + 32 + 32;

// The server's hello: this rank's and a fresh nonce, for `channel`.
std::string LinkServerHello(Channel channel, uint32_t rank, const Nonce& nonce);
// What a client makes of the kLinkServerHelloBytes it read: the rank that says it answers and
// its nonce, or why this is no server of the channel.
struct ServerHelloCheck {
  uint32_t rank = 0;
  Nonce nonce{};
};
StatusOr<ServerHelloCheck> CheckLinkServerHello(std::string_view hello, Channel channel);

// The client hello for transcript t (its proof included), and what a server makes of one:
// the claimed rank and gang, or why it is refused. Exposed for tests.
StatusOr<std::string> LinkClientHello(std::string_view key, const LinkTranscript& t);
struct HelloCheck {
  bool complete = false;  // all kLinkClientHelloBytes are there (else: wait for more)
  Status refusal;         // not ok: close the connection, for this reason
  uint32_t from_rank = 0;
  int64_t gang = -1;
  Nonce client_nonce{};
};
// `received` is what arrived so far (at most kLinkClientHelloBytes). Garbage is refused as
// soon as its first bytes show it (a wrong magic, version or channel). Only the hello of a
// holder of `self`'s key for `self`'s gang is complete without a refusal.
HelloCheck CheckLinkClientHello(std::string_view received, const GangIdentity& self,
                                Channel channel, uint32_t own_rank, const Nonce& server_nonce);

}  // namespace tj::cluster
