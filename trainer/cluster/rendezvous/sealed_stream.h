// One end of an authenticated rendezvous session: every message is a frame sealed with the
// session key and numbered per direction (wire/rendezvous_protocol.h), so a message injected
// into, replayed in or spliced from another session ends it unheard. The chief's session
// threads and the client both talk through it. Not thread-safe: one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "trainer/cluster/net/socket.h"
#include "trainer/cluster/wire/authentication.h"

namespace tj::cluster {

class SealedStream {
 public:
  enum class End { kClient, kServer };
  SealedStream() = default;
  SealedStream(Socket socket, const Mac& session_key, End end)
      : socket_(std::move(socket)), key_(session_key), end_(end) {}

  // Seals `body` as this end's next message and writes it before the deadline.
  Status Send(std::string_view body, Deadline deadline);
  // Reads the other end's next message and checks its tag. Errors: the peer closed the
  // connection before a frame (kUnavailable), a frame over the protocol's size, a tag that does
  // not verify (kPermissionDenied: "message not authenticated ...").
  StatusOr<std::string> Receive(Deadline deadline);

  Socket& socket() { return socket_; }

 private:
  Socket socket_;
  Mac key_{};
  End end_ = End::kClient;
  uint64_t sent_ = 0;      // messages sent (the next one's sequence number)
  uint64_t received_ = 0;  // messages received
};

// A u32 length, at most `max`, then that many bytes, read before the deadline.
StatusOr<std::string> ReadLengthPrefixed(Socket& socket, uint32_t max, Deadline deadline);

}  // namespace tj::cluster
