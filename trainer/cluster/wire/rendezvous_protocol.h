// The messages of the rendezvous (rendezvous/rendezvous_server.h serves them, and
// rendezvous/rendezvous_client.h sends them): the mutual handshake, the sealed frames of a
// session, and the store's requests and replies. Pure functions over bytes, on wire_codec.h.
//
// Wire format, version 3 (all integers big-endian; str = u32 length + bytes):
//   server hello:   "TJRV" u8 version server_nonce[32]
//   client hello:   "TJRV" u8 version str task_name (<= 256) i64 gang client_nonce[32]
//                   client_proof[32]
//   server verdict: u8 0 server_proof[32]     (accepted; the session starts)
//                 | u8 1 str reason (<= 256)  (refused; the connection is closed)
//                 | u8 2 i64 chief_gang other_gang_proof[32]  (the client proved the key for
//                   another gang than the chief's; closed)
//   then messages both ways, each a frame:  u32 length, body, tag[32] where
//     tag = HMAC(session_key, direction || u64 sequence || body), direction 'C' (client to
//     server) or 'S', sequence counting from 0 per direction.
//   request bodies:  u8 op, then  Set: str key, str value  -> reply u8 0
//                                 Get: str key             -> reply u8 found, str value
//                                 Wait: u32 n, n x str, u64 timeout_ms -> u8 (0 ok, 1 timed out)
//
// Authentication: both sides prove they hold the job's key. The server sends a nonce, the
// client answers with its own nonce and an HMAC over both nonces, both roles (its task name,
// the chief's task name) and the gang's number (TJ_RESTART_COUNT); the server answers with an
// HMAC of its own over the same transcript. A task of another gang that holds the key is
// refused with the chief's gang and a proof over it: a task of an older gang stops at once (it
// was replaced), a task of a newer one waits for its own chief. Each side derives a session
// key from the transcript, and every message that follows carries an HMAC under that key and
// a per-direction sequence number: a connection cannot be taken over, replayed or spliced into
// another once the handshake is done.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trainer/cluster/wire/authentication.h"

namespace tj::cluster {

inline constexpr uint8_t kRendezvousVersion = 3;
inline constexpr size_t kRendezvousServerHelloBytes = 4 + 1 + 32;
// Before authentication nothing longer is read: a task name, a refusal's reason.
inline constexpr uint32_t kMaxTaskName = 256;
inline constexpr uint32_t kMaxReason = 256;
inline constexpr size_t kMaxRendezvousClientHello = 4 + 1 + 4 + kMaxTaskName + 8 + 32 + 32;
// After it: a key or value, and a frame's body.
inline constexpr uint32_t kMaxRendezvousString = 64u << 20;
inline constexpr uint32_t kMaxRendezvousFrame = kMaxRendezvousString + (1u << 20);
// The verdict that follows kOtherGang: i64 chief_gang, other_gang_proof[32].
inline constexpr size_t kOtherGangVerdictBytes = 8 + 32;

// The message a refused client reports (and the lead can match on): names the chief.
inline constexpr std::string_view kWrongKeyReason = "wrong TJ_RENDEZVOUS_KEY";

// ---- The proofs (pure functions, exposed for tests).

// What both proofs and the session key are computed over.
struct HandshakeTranscript {
  Nonce server_nonce{};
  Nonce client_nonce{};
  std::string client_task;  // "worker 1"
  std::string chief_task;   // "worker 0" (or "chief 0")
  int64_t gang = -1;        // the gang's number (TJ_RESTART_COUNT); -1 for a run by hand
};
StatusOr<Mac> ClientProof(std::string_view key, const HandshakeTranscript& t);
StatusOr<Mac> ServerProof(std::string_view key, const HandshakeTranscript& t);
StatusOr<Mac> SessionKey(std::string_view key, const HandshakeTranscript& t);
// The chief's proof when it refuses a key holder of another gang: over the transcript with
// the chief's own gang in it.
StatusOr<Mac> OtherGangProof(std::string_view key, const HandshakeTranscript& t);

// ---- The handshake's messages.

std::string RendezvousServerHello(const Nonce& nonce);
// The server's nonce from the kRendezvousServerHelloBytes a client read, or why this is no
// rendezvous chief.
StatusOr<Nonce> ParseRendezvousServerHello(std::string_view hello);

struct RendezvousClientHello {
  std::string task;  // as the client sent it: print it through Printable
  int64_t gang = -1;
  Nonce client_nonce{};
  Mac proof{};
};
std::string EncodeClientHello(const RendezvousClientHello& hello);
// What the server makes of the bytes of a client hello received so far.
struct ClientHelloCheck {
  bool complete = false;  // a whole hello, and nothing after it
  Status refusal;         // not ok: close the connection, for this reason
  RendezvousClientHello hello;
};
ClientHelloCheck CheckRendezvousClientHello(std::string_view received);

enum class Verdict : uint8_t { kAccepted = 0, kRefused = 1, kOtherGang = 2 };
std::string AcceptedVerdict(const Mac& server_proof);
std::string RefusedVerdict(std::string_view reason);
std::string OtherGangVerdict(int64_t chief_gang, const Mac& proof);
// The kOtherGangVerdictBytes after a kOtherGang verdict byte.
struct OtherGang {
  int64_t chief_gang = -1;
  Mac proof{};
};
OtherGang ParseOtherGang(std::string_view bytes);

// A peer-supplied name or reason, made safe for a log line.
std::string Printable(std::string_view s);

// ---- A session's frames.

inline constexpr char kFromClient = 'C', kFromServer = 'S';
// u32 length, body, tag.
StatusOr<std::string> SealFrame(const Mac& session_key, char direction, uint64_t sequence,
                                std::string_view body);
// Whether `tag` authenticates `body` as message `sequence` from `direction`; an error
// (kPermissionDenied: "message not authenticated ...") when it does not.
Status CheckFrameTag(const Mac& session_key, char direction, uint64_t sequence,
                     std::string_view body, const Mac& tag);

// ---- The store's requests and replies.

enum class Op : uint8_t { kSet = 1, kGet = 2, kWait = 3 };
struct Request {
  Op op = Op::kGet;
  std::string key{};                     // kSet, kGet
  std::string value{};                   // kSet
  std::vector<std::string> keys{};       // kWait
  std::chrono::milliseconds timeout{0};  // kWait: at most a day
};
std::string EncodeRequest(const Request& request);
// A request as the server reads it, or why the session must close ("malformed request: ...").
StatusOr<Request> ParseRequest(std::string_view body);

std::string SetReply();
std::string GetReply(const StatusOr<std::string>& value);
std::string WaitReply(bool all_set);
// The replies as the client reads them; an error ("bad reply") for anything else.
Status ParseSetReply(std::string_view body);
// A Get's answer: whether the key is set, and its value.
struct GetResult {
  bool found = false;
  std::string value;
};
StatusOr<GetResult> ParseGetReply(std::string_view body);
StatusOr<bool> ParseWaitReply(std::string_view body);

}  // namespace tj::cluster
