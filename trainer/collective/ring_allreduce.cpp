#include "trainer/collective/ring_allreduce.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>

#include "common/backoff.h"
#include "trainer/cluster/config/host_port.h"
#include "trainer/cluster/net/link_handshake.h"

namespace tj::collective {
namespace {

using cluster::Deadline;
using cluster::Socket;

// Elements per segment (512 KiB of float32): large enough that a segment costs few system
// calls, small enough that the next hop starts on it while the rest of the chunk is still
// arriving. On loopback 131,072 took half the time of 32,768 and 8,192 (bench/allreduce).
constexpr size_t kSegmentElements = 131072;

std::string StoreKey(int rank) { return "ring/" + std::to_string(rank); }

struct Endpoint {
  std::string host;
  int port = 0;
};

StatusOr<Endpoint> ParseEndpoint(const std::string& value, int rank) {
  Endpoint e;
  const size_t a = value.find(' ');
  if (a != std::string::npos) {
    e.host = value.substr(0, a);
    try {
      e.port = std::stoi(value.substr(a + 1));
    } catch (const std::exception&) {
      e.port = 0;
    }
  }
  if (e.host.empty() || e.port <= 0 || e.port > 65535) {
    return Status::Error("ring all-reduce: rank " + std::to_string(rank) +
                         " published a malformed address '" + value.substr(0, 80) + "'");
  }
  return e;
}

void NoDelay(const Socket& s) {
  int one = 1;
  setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Connects to the next rank and completes the handshake, trying again while the handshake
// fails (a listener busy with strangers may have closed this connection among them) until
// the deadline. A refused connect fails at once: nothing listens there any more.
StatusOr<Socket> ConnectNext(const Endpoint& next_end, int rank, int next,
                             const cluster::GangIdentity& identity, Deadline deadline) {
  ExponentialBackoff backoff(std::chrono::milliseconds(20), std::chrono::milliseconds(500));
  Status last;
  while (true) {
    const Deadline attempt =
        std::min(deadline, cluster::DeadlineIn(std::chrono::milliseconds(10000)));
    bool reached = true;
    StatusOr<Socket> s = cluster::ConnectTcp(next_end.host, next_end.port, attempt);
    if (!s.ok()) {
      reached = false;
    } else {
      s = cluster::LinkHandshake(std::move(s).value(), cluster::Channel::kRing, rank, next,
                                 identity, attempt);
    }
    if (s.ok()) return s;
    last = s.status();
    if (!reached && last.code() == StatusCode::kUnavailable) break;
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::milliseconds(0)) break;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(backoff.Next(), left));
  }
  return last.WithContext("ring all-reduce: connecting to rank " + std::to_string(next) + " at " +
                          cluster::FormatHostPort(next_end.host, next_end.port));
}

// sum[i] = sum[i] + add[i]: one pass of a left-to-right sum, which the compiler vectorises.
void AddInto(float* sum, const float* add, size_t n) {
  for (size_t i = 0; i < n; ++i) sum[i] += add[i];
}

// One transfer of a segment: sent to the next rank or received from the previous one.
struct Op {
  size_t begin = 0;  // element range in the buffers
  size_t end = 0;
  int shard = 0;           // sends: the buffer sent from (receives always write shard 0)
  bool add = false;        // receives: add into the buffer (reduce-scatter) or copy (all-gather)
  int fold = 1;            // receives that add: the rank's first `fold` shards are added in turn
  bool round_own = false;  // sends, bfloat16: the rank's own reduced chunk, rounded in place
  long depends_on = -1;    // sends: the receive that must be complete first
};

struct Schedule {
  std::vector<Op> sends, recvs;  // each in the order it happens on its connection
  // Before anything moves: chunk `span` of shards [first, end) added, left to right, into
  // shard `first`, for the chunks whose sum starts on this rank at a shard other than its last.
  struct Fold {
    Span span;
    int first = 0;
    int end = 0;
  };
  std::vector<Fold> folds;
};

// The ring of p ranks carrying the sum of p x m virtual ranks, rank r holding virtual ranks
// [r m, (r + 1) m) as its shards 0..m-1: the buffer is cut into p m chunks; chunk c's sum
// starts at virtual rank c, on rank c / m, with that rank's shards from c onward, then
// passes round the ring, every rank adding its shards in order, until virtual rank c - 1 has
// added its own: p - 1 hops when c is a rank's first shard, p otherwise (back on rank c / m,
// which adds its shards before c). The rank that adds last owns the sum and starts the
// all-gather, p - 1 hops more. Message h (1-based) of a chunk goes from the rank h - 1 hops
// past the start to the next, at step h - 1; each connection carries its messages in
// (step, chunk) order, the same order on both ends. A send of step t waits only for a
// receive of step t - 1, so no rank waits on another in a cycle.
//
// With m = 1 this is the plain ring: in step t each rank sends one chunk and receives
// another, 2 (p - 1) steps, chunk c summed from rank c on.
Schedule PlanRing(int rank, int p, int m, size_t count, bool bf16) {
  struct Message {
    int step = 0;
    int chunk = 0;
    int hop = 0;  // 1-based
  };
  const int shards = p * m;
  std::vector<Message> sends, recvs;
  Schedule s;
  for (int c = 0; c < shards; ++c) {
    const int start = c / m, j = c % m;
    const int reduce_hops = j == 0 ? p - 1 : p;
    if (start == rank && j + 1 < m) s.folds.push_back({ChunkOf(count, shards, c), j, m});
    for (int h = 1; h <= reduce_hops + p - 1; ++h) {
      if ((start + h - 1) % p == rank) sends.push_back({h - 1, c, h});
      if ((start + h) % p == rank) recvs.push_back({h - 1, c, h});
    }
  }
  auto by_step = [](const Message& a, const Message& b) {
    return a.step != b.step ? a.step < b.step : a.chunk < b.chunk;
  };
  std::sort(sends.begin(), sends.end(), by_step);
  std::sort(recvs.begin(), recvs.end(), by_step);
  // The first receive op of (chunk, hop), for the sends that wait on it.
  std::vector<std::vector<long>> first_recv(static_cast<size_t>(shards));
  for (const Message& msg : recvs) {
    const int j = msg.chunk % m;
    const int reduce_hops = j == 0 ? p - 1 : p;
    auto& of_chunk = first_recv[static_cast<size_t>(msg.chunk)];
    of_chunk.resize(2 * static_cast<size_t>(p), -1);
    of_chunk[static_cast<size_t>(msg.hop)] = static_cast<long>(s.recvs.size());
    const Span span = ChunkOf(count, shards, msg.chunk);
    for (size_t b = span.begin; b < span.end; b += kSegmentElements) {
      Op op{b, std::min(span.end, b + kSegmentElements)};
      op.add = msg.hop <= reduce_hops;
      // Back on the rank it started from, a chunk takes only the shards before it.
      op.fold = msg.hop == p && j > 0 ? j : m;
      s.recvs.push_back(op);
    }
  }
  for (const Message& msg : sends) {
    const int j = msg.chunk % m;
    const int reduce_hops = j == 0 ? p - 1 : p;
    const Span span = ChunkOf(count, shards, msg.chunk);
    long k = 0;
    for (size_t b = span.begin; b < span.end; b += kSegmentElements, ++k) {
      Op op{b, std::min(span.end, b + kSegmentElements)};
      op.shard = msg.hop == 1 ? j : 0;
      op.round_own = bf16 && msg.hop == reduce_hops + 1;
      if (msg.hop > 1) {
        op.depends_on =
            first_recv[static_cast<size_t>(msg.chunk)][static_cast<size_t>(msg.hop - 1)] + k;
      }
      s.sends.push_back(op);
    }
  }
  return s;
}

// One all-reduce in flight: the schedule played on the two sockets by the calling thread,
// moving whatever the sockets take and waiting in poll(2) only when nothing moves.
class Transfer {
 public:
  Transfer(float* const* shards, Schedule schedule, bool bf16, int next_fd, int prev_fd,
           std::vector<uint8_t>& send_stage, std::vector<uint8_t>& recv_stage)
      : shards_(shards),
        data_(shards[0]),
        schedule_(std::move(schedule)),
        bf16_(bf16),
        elem_bytes_(bf16 ? 2 : 4),
        next_fd_(next_fd),
        prev_fd_(prev_fd),
        send_stage_(send_stage),
        recv_stage_(recv_stage) {
    send_stage_.resize(kSegmentElements * elem_bytes_);
    recv_stage_.resize(kSegmentElements * 4);
  }

  // Ok, or what failed ("rank N closed the connection", "timed out: ..."); the caller adds
  // the ranks' names.
  StatusOr<bool> Run(Deadline deadline) {
    for (const Schedule::Fold& f : schedule_.folds) FoldOwnShards(f);
    while (next_send_ < schedule_.sends.size() || next_recv_ < schedule_.recvs.size()) {
      bool progressed = false;
      TJ_RETURN_IF_ERROR(PumpSends(&progressed));
      TJ_RETURN_IF_ERROR(PumpRecvs(&progressed));
      if (!progressed) TJ_RETURN_IF_ERROR(WaitForSockets(deadline));
    }
    return true;
  }

 private:
  bool NextSendReady() const {
    return send_started_ || schedule_.sends[next_send_].depends_on < static_cast<long>(next_recv_);
  }

  void StartSend() {
    const Op& op = schedule_.sends[next_send_];
    const size_t n = op.end - op.begin;
    if (!bf16_) {
      send_ptr_ = reinterpret_cast<const uint8_t*>(shards_[op.shard] + op.begin);
    } else {
      auto* out = reinterpret_cast<uint16_t*>(send_stage_.data());
      for (size_t i = 0; i < n; ++i) {
        out[i] = ToBfloat16(data_[op.begin + i]);
        if (op.round_own) data_[op.begin + i] = FromBfloat16(out[i]);
      }
      send_ptr_ = send_stage_.data();
    }
    send_len_ = n * elem_bytes_;
    sent_ = 0;
    send_started_ = true;
  }

  // Sends while the socket takes bytes and the next segment is ready.
  Status PumpSends(bool* progressed) {
    while (next_send_ < schedule_.sends.size() && NextSendReady()) {
      if (!send_started_) StartSend();
      const ssize_t n =
          ::send(next_fd_, send_ptr_ + sent_, send_len_ - sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return Status::Error(std::string("sending: ") + std::strerror(errno));
      }
      *progressed = true;
      sent_ += static_cast<size_t>(n);
      if (sent_ == send_len_) {
        ++next_send_;
        send_started_ = false;
      }
    }
    return Status::Ok();
  }

  // A float32 copy lands in the buffer itself; anything else goes through the stage.
  uint8_t* RecvTarget() const {
    const Op& op = schedule_.recvs[next_recv_];
    if (!bf16_ && !op.add) return reinterpret_cast<uint8_t*>(data_ + op.begin);
    return recv_stage_.data();
  }

  void FinishRecv() {
    const Op& op = schedule_.recvs[next_recv_];
    float* dst = data_ + op.begin;
    const size_t n = op.end - op.begin;
    if (bf16_) {
      const auto* in = reinterpret_cast<const uint16_t*>(recv_stage_.data());
      if (op.add) {
        for (size_t i = 0; i < n; ++i) dst[i] = FromBfloat16(in[i]) + dst[i];
      } else {
        for (size_t i = 0; i < n; ++i) dst[i] = FromBfloat16(in[i]);
      }
    } else if (op.add && op.fold == 1) {
      const auto* in = reinterpret_cast<const float*>(recv_stage_.data());
      for (size_t i = 0; i < n; ++i) dst[i] = in[i] + dst[i];
    } else if (op.add) {
      // One pass per shard, each element still summed left to right.
      const auto* in = reinterpret_cast<const float*>(recv_stage_.data());
      for (size_t i = 0; i < n; ++i) dst[i] = in[i] + dst[i];
      for (int k = 1; k < op.fold; ++k) AddInto(dst, shards_[k] + op.begin, n);
    }
    ++next_recv_;
    received_ = 0;
  }

  // Receives what has arrived.
  Status PumpRecvs(bool* progressed) {
    while (next_recv_ < schedule_.recvs.size()) {
      const size_t want =
          (schedule_.recvs[next_recv_].end - schedule_.recvs[next_recv_].begin) * elem_bytes_;
      const ssize_t n = ::recv(prev_fd_, RecvTarget() + received_, want - received_, MSG_DONTWAIT);
      if (n == 0) return Status::Error("closed the connection");
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return Status::Error(std::string("receiving: ") + std::strerror(errno));
      }
      *progressed = true;
      received_ += static_cast<size_t>(n);
      if (received_ == want) FinishRecv();
    }
    return Status::Ok();
  }

  Status WaitForSockets(Deadline deadline) {
    pollfd fds[2];
    int nfds = 0;
    if (next_recv_ < schedule_.recvs.size()) fds[nfds++] = {prev_fd_, POLLIN, 0};
    if (next_send_ < schedule_.sends.size() && NextSendReady())
      fds[nfds++] = {next_fd_, POLLOUT, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Status::Error(
          "timed out: no progress before the collective timeout (" + std::to_string(next_send_) +
          "/" + std::to_string(schedule_.sends.size()) + " segments sent, " +
          std::to_string(next_recv_) + "/" + std::to_string(schedule_.recvs.size()) + " received)");
    }
    const int r = ::poll(fds, static_cast<nfds_t>(nfds), static_cast<int>(left.count()) + 1);
    if (r < 0 && errno != EINTR) return Status::Error(std::string("poll: ") + std::strerror(errno));
    return Status::Ok();
  }

  void FoldOwnShards(const Schedule::Fold& f) {
    const size_t n = f.span.end - f.span.begin;
    for (int k = f.first + 1; k < f.end; ++k)
      AddInto(shards_[f.first] + f.span.begin, shards_[k] + f.span.begin, n);
  }

  float* const* shards_;
  float* data_;  // shards_[0]: every receive lands here
  Schedule schedule_;
  bool bf16_;
  size_t elem_bytes_;
  int next_fd_, prev_fd_;
  std::vector<uint8_t>& send_stage_;
  std::vector<uint8_t>& recv_stage_;
  // The next op of schedule_.sends / .recvs, and the bytes of it already sent / received.
  size_t next_send_ = 0, sent_ = 0, next_recv_ = 0, received_ = 0;
  bool send_started_ = false;
  const uint8_t* send_ptr_ = nullptr;
  size_t send_len_ = 0;
};

}  // namespace

StatusOr<WireType> ParseWireType(const std::string& name) {
  if (name == "float32") return WireType::kFloat32;
  if (name == "bfloat16") return WireType::kBfloat16;
  return Status::Error("--allreduce-dtype '" + name +
                       "' is not one of float32 (exact, the default) and bfloat16 (half the "
                       "bytes on the wire)");
}

const char* WireTypeName(WireType type) {
  return type == WireType::kBfloat16 ? "bfloat16" : "float32";
}

uint16_t ToBfloat16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // a quiet NaN stays a NaN
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float FromBfloat16(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out = 0.0f;
  std::memcpy(&out, &bits, 4);
  return out;
}

Span ChunkOf(size_t count, int ranks, int chunk) {
  const size_t n = static_cast<size_t>(ranks);
  const size_t c = static_cast<size_t>(chunk);
  const size_t base = count / n, extra = count % n;
  const size_t begin = c * base + std::min(c, extra);
  return {begin, begin + base + (c < extra ? 1 : 0)};
}

StatusOr<std::unique_ptr<RingAllReduce>> RingAllReduce::Connect(cluster::KeyValueStore& store,
                                                                int rank, int size,
                                                                const std::string& own_ip,
                                                                const RingAuth& auth, WireType wire,
                                                                std::chrono::milliseconds timeout) {
  if (size < 2 || rank < 0 || rank >= size) {
    return Status::Error("ring all-reduce: rank " + std::to_string(rank) + " of " +
                         std::to_string(size) + " (needs at least 2 ranks)");
  }
  if (auth.identity.job_key.empty()) {
    return Status::Error(StatusCode::kPermissionDenied,
                         "ring all-reduce: no key (TJ_RENDEZVOUS_KEY) to authenticate the ring's "
                         "connections with");
  }
  const Deadline deadline = cluster::DeadlineIn(timeout);
  StatusOr<Socket> listener = cluster::ListenTcp(own_ip, 0);
  if (!listener.ok()) return listener.status().WithContext("ring all-reduce: listening");
  TJ_RETURN_IF_ERROR(
      store.Set(StoreKey(rank), own_ip + " " + std::to_string(cluster::LocalPort(*listener))));
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;

  // The previous rank is accepted on a thread of its own from now on, while this one waits
  // for the next rank's address and connects to it: no rank waits on another in a cycle, and
  // strangers at the listener are served (and closed) alongside, never ahead of, the real
  // peer.
  cluster::LinkAcceptorOptions ao;
  ao.channel = cluster::Channel::kRing;
  ao.own_rank = rank;
  ao.identity = auth.identity;
  ao.handshake_timeout = auth.handshake_timeout;
  ao.log = auth.log;
  cluster::LinkAcceptor acceptor(&*listener, ao);
  std::atomic<bool> stop{false};
  StatusOr<cluster::LinkAcceptor::Accepted> from_prev = cluster::LinkAcceptor::Accepted{};
  std::thread accept_thread;
  try {
    accept_thread = std::thread([&] {
      from_prev = acceptor.Next(
          deadline, [prev](int r) { return r == prev; }, &stop);
    });
  } catch (const std::system_error& e) {
    return Status::Error(std::string("ring all-reduce: cannot start a thread: ") + e.what());
  }
  StatusOr<Socket> to_next = [&]() -> StatusOr<Socket> {
    TJ_RETURN_IF_ERROR(store.Wait({StoreKey(next)}, timeout));
    StatusOr<std::string> next_value = store.Get(StoreKey(next));
    if (!next_value.ok()) return next_value.status();
    StatusOr<Endpoint> next_end = ParseEndpoint(*next_value, next);
    if (!next_end.ok()) return next_end.status();
    return ConnectNext(*next_end, rank, next, auth.identity, deadline);
  }();
  if (!to_next.ok()) stop.store(true);
  accept_thread.join();
  if (!to_next.ok()) {
    const std::string& refused = acceptor.last_refusal();
    if (refused.empty()) return to_next.status();
    return Status::Error(
        to_next.status().code(),
        to_next.status().message() + " (at this rank's ring port, last refused: " + refused + ")");
  }
  if (!from_prev.ok()) return from_prev.status().WithContext("ring all-reduce: accepting");
  if (!from_prev->socket.valid()) {
    const std::string& refused = acceptor.last_refusal();
    return Status::Error("ring all-reduce: rank " + std::to_string(prev) +
                         " did not connect in time" +
                         (refused.empty() ? "" : " (last refused: " + refused + ")"));
  }
  NoDelay(*to_next);
  NoDelay(from_prev->socket);
  // The listener closes here: once the ring is formed this rank has no ring port open.
  return std::unique_ptr<RingAllReduce>(new RingAllReduce(
      rank, size, wire, std::move(to_next).value(), std::move(from_prev->socket)));
}

Status RingAllReduce::Sum(float* data, size_t count, Deadline deadline) {
  return SumShards(&data, 1, count, deadline);
}

Status RingAllReduce::SumShards(float* const* shards, int shards_per_rank, size_t count,
                                Deadline deadline) {
  const bool bf16 = wire_ == WireType::kBfloat16;
  if (shards_per_rank < 1 || (bf16 && shards_per_rank > 1)) {
    return Status::Error("ring all-reduce of " + std::to_string(shards_per_rank) +
                         " shards per rank: needs at least one, and float32 on the wire for "
                         "more than one");
  }
  if (count == 0) return Status::Ok();
  Transfer transfer(shards, PlanRing(rank_, size_, shards_per_rank, count, bf16), bf16, next_.fd(),
                    prev_.fd(), send_stage_, recv_stage_);
  StatusOr<bool> done = transfer.Run(deadline);
  if (done.ok()) return Status::Ok();
  std::string what = std::string(WireTypeName(wire_)) + ", " + std::to_string(count) + " floats";
  if (shards_per_rank > 1) what += " x " + std::to_string(shards_per_rank) + " shards";
  return Failed("ring all-reduce (" + what + ")", done.status());
}

void SumInRingOrder(float* const* shards, int count_of_shards, size_t count) {
  for (int c = 0; c < count_of_shards; ++c) {
    // Chunk c's sum builds up in shard c, one pass per shard, then lands in shard 0.
    const Span span = ChunkOf(count, count_of_shards, c);
    const size_t n = span.end - span.begin;
    float* sum = shards[c] + span.begin;
    for (int k = 1; k < count_of_shards; ++k)
      AddInto(sum, shards[(c + k) % count_of_shards] + span.begin, n);
    if (c != 0 && n != 0) std::memcpy(shards[0] + span.begin, sum, n * sizeof(float));
  }
}

Status RingAllReduce::Failed(const std::string& op, const Status& status) const {
  std::string what = status.message();
  const int prev = (rank_ + size_ - 1) % size_, next = (rank_ + 1) % size_;
  if (what == "closed the connection") {
    what = "rank " + std::to_string(prev) + " " + what;
  } else if (what.rfind("receiving: ", 0) == 0) {
    what = "receiving from rank " + std::to_string(prev) + ": " + what.substr(11);
  } else if (what.rfind("sending: ", 0) == 0) {
    what = "sending to rank " + std::to_string(next) + ": " + what.substr(9);
  }
  return Status::Error(op + ": " + what);
}

Status RingAllReduce::Broadcast(void* data, size_t bytes, int root, Deadline deadline) {
  if (root < 0 || root >= size_) {
    return Status::Error("broadcast from rank " + std::to_string(root) + ": no such rank (size " +
                         std::to_string(size_) + ")");
  }
  auto* p = static_cast<uint8_t*>(data);
  // The bytes go round the ring from the root; each rank passes on what it has received.
  size_t received = rank_ == root ? bytes : 0;
  size_t sent = (rank_ + 1) % size_ == root ? bytes : 0;
  const std::string op =
      "broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root);
  while (received < bytes || sent < bytes) {
    bool progressed = false;
    if (received < bytes) {
      const ssize_t n = ::recv(prev_.fd(), p + received, bytes - received, MSG_DONTWAIT);
      if (n == 0) return Failed(op, Status::Error("closed the connection"));
      if (n > 0) {
        received += static_cast<size_t>(n);
        progressed = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return Failed(op, Status::Error(std::string("receiving: ") + std::strerror(errno)));
      }
    }
    if (sent < received) {
      const ssize_t n = ::send(next_.fd(), p + sent, received - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        progressed = true;
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return Failed(op, Status::Error(std::string("sending: ") + std::strerror(errno)));
      }
    }
    if (progressed) continue;
    pollfd fds[2];
    nfds_t nfds = 0;
    if (received < bytes) fds[nfds++] = {prev_.fd(), POLLIN, 0};
    if (sent < received) fds[nfds++] = {next_.fd(), POLLOUT, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Failed(op, Status::Error("timed out: no progress before the collective timeout (" +
                                      std::to_string(received) + "/" + std::to_string(bytes) +
                                      " bytes received)"));
    }
    if (::poll(fds, nfds, static_cast<int>(left.count()) + 1) < 0 && errno != EINTR) {
      return Failed(op, Status::Error(std::string("poll: ") + std::strerror(errno)));
    }
  }
  return Status::Ok();
}

Status RingAllReduce::Barrier(Deadline deadline) {
  // Every rank's result depends on every rank's entry: a sum is a barrier.
  std::vector<float> ones(static_cast<size_t>(size_), 1.0f);
  Status s = Sum(ones.data(), ones.size(), deadline);
  if (s.ok()) return s;
  return Status::Error("barrier: " + s.message());
}

}  // namespace tj::collective
