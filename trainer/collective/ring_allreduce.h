// The gradient all-reduce of the CPU backend: a ring (reduce-scatter, then all-gather) over
// two TCP connections per rank, to the next rank and from the previous one, driven by the
// calling thread alone with poll(2). The buffer is cut into one chunk per rank and each chunk
// into segments; a segment is sent on as soon as it is reduced, so sending, receiving and
// summing overlap and no thread hand-off or copy into an intermediate buffer sits between the
// network and the sum. Each chunk is summed in one fixed order along the ring and then
// copied, so every rank ends with bitwise the same result, the same on every run.
//
// On the wire the values are float32, or bfloat16 (half the bytes; partial sums are rounded
// at every hop and the result is the bfloat16 rounding of the sum, identical on every rank).
//
// The same two connections carry the broadcasts and barriers of the CPU collective.
//
// The connections are authenticated when they are made (trainer/cluster/net/link_handshake.h):
// the previous rank proves it holds the job's key, for this gang, as that rank; the next rank
// proves the same back. Strangers at a rank's ring port are handled alongside the real peer
// and closed, never ahead of it; once the ring is formed the port is closed. Errors (a closed
// connection, no progress before the deadline) leave the ring unusable; the caller reports
// which peer is to blame.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/event_log.h"
#include "common/status.h"
#include "trainer/cluster/config/gang_identity.h"
#include "trainer/cluster/net/link_handshake.h"
#include "trainer/cluster/net/socket.h"
#include "trainer/cluster/rendezvous/key_value_store.h"

namespace tj::collective {

enum class WireType { kFloat32, kBfloat16 };

// "float32" or "bfloat16"; an error naming the accepted values otherwise.
StatusOr<WireType> ParseWireType(const std::string& name);
const char* WireTypeName(WireType type);

// bfloat16 by round-to-nearest-even of the float's upper 16 bits (NaN stays NaN).
uint16_t ToBfloat16(float value);
float FromBfloat16(uint16_t value);

// The chunk of [0, count) rank `chunk` of `ranks` owns: [begin, end). Chunks differ in size by
// at most one element.
struct Span {
  size_t begin = 0;
  size_t end = 0;
};
Span ChunkOf(size_t count, int ranks, int chunk);

// In one process, the sum the ring of `count_of_shards` ranks makes of their buffers: chunk c
// (ChunkOf(count, count_of_shards, c)) is shards[c] + shards[c + 1] + ... + shards[c - 1],
// wrapping round, added left to right, into shards[0]; the other buffers are overwritten with
// partial sums. The order RingAllReduce::SumShards keeps at every number of ranks.
void SumInRingOrder(float* const* shards, int count_of_shards, size_t count);

// How the ring's connections are authenticated.
struct RingAuth {
  cluster::GangIdentity identity;  // the job's key (required) and this task's gang
  // Each connection at the ring port must complete its handshake this long after it was
  // accepted.
  std::chrono::milliseconds handshake_timeout{5000};
  EventLog* log = nullptr;  // refused connections (rate-limited); may be null
};

class RingAllReduce {
 public:
  // Publishes this rank's ring address in `store`, connects to the next rank and accepts the
  // previous one, both authenticated with `auth`, all before `timeout`. `own_ip` is the
  // numeric address to listen on (the rank's own TF_CONFIG host). size must be at least 2.
  static StatusOr<std::unique_ptr<RingAllReduce>> Connect(cluster::KeyValueStore& store, int rank,
                                                          int size, const std::string& own_ip,
                                                          const RingAuth& auth, WireType wire,
                                                          std::chrono::milliseconds timeout);

  // Sums data[0..count) over all ranks in place. Fails when a connection closes or no byte
  // moves before the deadline; after a failure the ring must not be used again.
  Status Sum(float* data, size_t count, cluster::Deadline deadline);
  // The sum of shards_per_rank x size() buffers ("shards", the replicas of elastic training),
  // this rank holding shards [rank x m, (rank + 1) x m) as shards[0..m): bitwise what Sum
  // gives on a ring of that many ranks, one shard each (SumInRingOrder), at every size that
  // divides the count of shards. The result lands in shards[0] on every rank; the other
  // shards' buffers are overwritten with partial sums. float32 on the wire only when m > 1.
  // Fails as Sum fails.
  Status SumShards(float* const* shards, int shards_per_rank, size_t count,
                   cluster::Deadline deadline);
  // Copies `bytes` bytes at `data` from rank `root` to every other rank, round the ring.
  Status Broadcast(void* data, size_t bytes, int root, cluster::Deadline deadline);
  // Returns once every rank has entered the barrier (a sum of one float per rank).
  Status Barrier(cluster::Deadline deadline);

  WireType wire() const { return wire_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  RingAllReduce(int rank, int size, WireType wire, cluster::Socket next, cluster::Socket prev)
      : rank_(rank), size_(size), wire_(wire), next_(std::move(next)), prev_(std::move(prev)) {}

  // The error of operation `op`, naming the peer a connection error came from.
  Status Failed(const std::string& op, const Status& status) const;

  int rank_;
  int size_;
  WireType wire_;
  cluster::Socket next_;  // we send to rank + 1
  cluster::Socket prev_;  // we receive from rank - 1
  std::vector<uint8_t> send_stage_;
  std::vector<uint8_t> recv_stage_;
};

}  // namespace tj::collective
