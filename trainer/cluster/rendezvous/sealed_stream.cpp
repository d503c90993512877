#include "trainer/cluster/rendezvous/sealed_stream.h"

#include "trainer/cluster/wire/rendezvous_protocol.h"
#include "trainer/cluster/wire/wire_codec.h"

namespace tj::cluster {

Status SealedStream::Send(std::string_view body, Deadline deadline) {
  const char direction = end_ == End::kClient ? kFromClient : kFromServer;
  StatusOr<std::string> frame = SealFrame(key_, direction, sent_++, body);
  if (!frame.ok()) return frame.status();
  return socket_.WriteAll(frame->data(), frame->size(), deadline);
}

StatusOr<std::string> SealedStream::Receive(Deadline deadline) {
  const char direction = end_ == End::kClient ? kFromServer : kFromClient;
  StatusOr<std::string> body = ReadLengthPrefixed(socket_, kMaxRendezvousFrame, deadline);
  if (!body.ok()) return body.status();
  Mac tag{};
  TJ_RETURN_IF_ERROR(socket_.ReadExactly(tag.data(), tag.size(), deadline));
  TJ_RETURN_IF_ERROR(CheckFrameTag(key_, direction, received_++, *body, tag));
  return body;
}

StatusOr<std::string> ReadLengthPrefixed(Socket& socket, uint32_t max, Deadline deadline) {
  std::string length(kWireLengthBytes, '\0');
  TJ_RETURN_IF_ERROR(socket.ReadExactly(length.data(), length.size(), deadline));
  WireReader in(length);
  uint32_t n = 0;
  if (!in.Length(&n, max)) {
    return Status::Error("message of " + std::to_string(n) + " bytes too long");
  }
  std::string bytes(n, '\0');
  TJ_RETURN_IF_ERROR(socket.ReadExactly(bytes.data(), n, deadline));
  return bytes;
}

}  // namespace tj::cluster
