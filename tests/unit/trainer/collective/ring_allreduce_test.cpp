// The ring all-reduce between threads of this process over real loopback TCP connections
// (the rendezvous store is an in-memory one): results bitwise equal to the documented
// summation order on every rank, for float32 and bfloat16 on the wire, 2 to 4 ranks and
// sizes that do not divide evenly; broadcasts from every root and barriers; strangers at the
// ring port (silent, garbage, a wrong key, another gang) closed without delaying the real
// peer; a peer that stops or goes away failing the others within the deadline.
#include "trainer/collective/ring_allreduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "tests/support/loopback_ring.h"
#include "tests/support/noise.h"

namespace tj::collective {
namespace {

using std::chrono::milliseconds;

RingAuth TestAuth(int64_t gang = 7) {
  RingAuth a;
  a.identity = {.gang = gang, .job_key = "ring-test-key"};
  a.handshake_timeout = milliseconds(1000);
  return a;
}

using ::tj::testing::MemoryStore;
using ::tj::testing::Noise;

// The documented order: chunk c is summed along the ring from rank c, each hop adding its
// own value to the partial sum it received; on a bfloat16 wire every partial sum is rounded
// when sent and the owner rounds the final sum.
std::vector<float> Reference(int ranks, size_t count, WireType wire) {
  std::vector<float> out(count);
  const bool bf16 = wire == WireType::kBfloat16;
  auto round = [&](float v) { return bf16 ? FromBfloat16(ToBfloat16(v)) : v; };
  for (int c = 0; c < ranks; ++c) {
    const Span s = ChunkOf(count, ranks, c);
    for (size_t i = s.begin; i < s.end; ++i) {
      float acc = Noise(c, i);
      for (int k = 1; k < ranks; ++k) acc = round(acc) + Noise((c + k) % ranks, i);
      out[i] = round(acc);
    }
  }
  return out;
}

// Connects `ranks` rings through one store, one thread per rank.
std::vector<std::unique_ptr<RingAllReduce>> ConnectAll(int ranks, WireType wire,
                                                       MemoryStore& store) {
  return ::tj::testing::ConnectLoopbackRings(ranks, wire, store, TestAuth());
}

// Every rank sums its Noise values; returns each rank's result and status.
std::vector<std::vector<float>> SumAll(std::vector<std::unique_ptr<RingAllReduce>>& rings,
                                       size_t count, std::vector<Status>* statuses) {
  const int ranks = static_cast<int>(rings.size());
  std::vector<std::vector<float>> data(ranks, std::vector<float>(count));
  statuses->assign(ranks, Status::Ok());
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < count; ++i) data[r][i] = Noise(r, i);
    threads.emplace_back([&, r] {
      (*statuses)[r] =
          rings[r]->Sum(data[r].data(), count, cluster::DeadlineIn(milliseconds(10000)));
    });
  }
  for (auto& t : threads) t.join();
  return data;
}

struct Case {
  int ranks;
  WireType wire;
};

class RingSum : public ::testing::TestWithParam<Case> {};

TEST_P(RingSum, EveryRankEndsWithTheReferenceBits) {
  const Case c = GetParam();
  MemoryStore store;
  auto rings = ConnectAll(c.ranks, c.wire, store);
  ASSERT_EQ(rings.size(), static_cast<size_t>(c.ranks));
  for (const auto& r : rings) ASSERT_NE(r, nullptr);
  // Sizes: the trainer's fused buffer, one that does not divide, fewer floats than ranks,
  // one float (the stop vote), and none.
  for (size_t count : {size_t{347148}, size_t{100003}, size_t{3}, size_t{1}, size_t{0}}) {
    std::vector<Status> statuses;
    auto data = SumAll(rings, count, &statuses);
    const std::vector<float> want = Reference(c.ranks, count, c.wire);
    for (int r = 0; r < c.ranks; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].message();
      // (memcmp of no bytes: an empty vector's data() may be null, which memcmp must not get)
      ASSERT_TRUE(count == 0 ||
                  std::memcmp(data[r].data(), want.data(), count * sizeof(float)) == 0)
          << "rank " << r << " of " << c.ranks << ", " << count << " floats, "
          << WireTypeName(c.wire);
    }
    // The sum is a sum: close to the exact one in double, within the rounding of operands
    // of the values' magnitude (2^-24 each in float32, 2^-8 per hop in bfloat16).
    for (size_t i = 0; i < count; i += 997) {
      double exact = 0, magnitude = 0;
      for (int r = 0; r < c.ranks; ++r) {
        exact += Noise(r, i);
        magnitude += std::fabs(Noise(r, i));
      }
      const double unit = c.wire == WireType::kBfloat16 ? 1.0 / 256 : 1.0 / (1 << 23);
      EXPECT_NEAR(data[0][i], exact, unit * magnitude * c.ranks) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndWires, RingSum,
                         ::testing::Values(Case{2, WireType::kFloat32}, Case{3, WireType::kFloat32},
                                           Case{4, WireType::kFloat32},
                                           Case{2, WireType::kBfloat16},
                                           Case{3, WireType::kBfloat16}),
                         [](const auto& info) {
                           return std::to_string(info.param.ranks) + "ranks_" +
                                  WireTypeName(info.param.wire);
                         });

// Elastic training: p ranks holding m shards each sum them bitwise as p x m ranks of one shard
// each would (the reference order above), whatever p is.
struct ShardCase {
  int ranks;
  int shards_per_rank;
};

class RingShardSum : public ::testing::TestWithParam<ShardCase> {};

TEST_P(RingShardSum, EveryRankEndsWithTheBitsOfOneShardPerRank) {
  const ShardCase c = GetParam();
  const int shards = c.ranks * c.shards_per_rank;
  MemoryStore store;
  auto rings = ConnectAll(c.ranks, WireType::kFloat32, store);
  ASSERT_EQ(rings.size(), static_cast<size_t>(c.ranks));
  for (const auto& r : rings) ASSERT_NE(r, nullptr);
  // Sizes: the trainer's fused buffer, chunks of more than one segment, a size that does not
  // divide, fewer floats than shards, one float, none.
  for (size_t count :
       {size_t{347149}, size_t{1200007}, size_t{100003}, size_t{5}, size_t{1}, size_t{0}}) {
    // data[r][k]: rank r's shard k, virtual rank r m + k's values.
    std::vector<std::vector<std::vector<float>>> data(c.ranks);
    std::vector<Status> statuses(c.ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < c.ranks; ++r) {
      data[r].assign(c.shards_per_rank, std::vector<float>(count));
      for (int k = 0; k < c.shards_per_rank; ++k) {
        for (size_t i = 0; i < count; ++i) data[r][k][i] = Noise(r * c.shards_per_rank + k, i);
      }
      threads.emplace_back([&, r] {
        std::vector<float*> mine;
        for (auto& shard : data[r]) mine.push_back(shard.data());
        statuses[r] = rings[r]->SumShards(mine.data(), c.shards_per_rank, count,
                                          cluster::DeadlineIn(milliseconds(20000)));
      });
    }
    for (auto& t : threads) t.join();
    const std::vector<float> want = Reference(shards, count, WireType::kFloat32);
    for (int r = 0; r < c.ranks; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].message();
      ASSERT_TRUE(count == 0 ||
                  std::memcmp(data[r][0].data(), want.data(), count * sizeof(float)) == 0)
          << "rank " << r << " of " << c.ranks << " x " << c.shards_per_rank << " shards, " << count
          << " floats";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndShards, RingShardSum,
                         ::testing::Values(ShardCase{2, 1}, ShardCase{2, 2}, ShardCase{2, 3},
                                           ShardCase{3, 2}, ShardCase{4, 2}, ShardCase{3, 3}),
                         [](const auto& info) {
                           return std::to_string(info.param.ranks) + "ranks_" +
                                  std::to_string(info.param.shards_per_rank) + "shards";
                         });

TEST(RingAllReduce, SumInRingOrderIsTheRingsOrderInOneProcess) {
  for (int shards = 1; shards <= 5; ++shards) {
    for (size_t count : {size_t{100003}, size_t{3}, size_t{0}}) {
      std::vector<std::vector<float>> data(shards, std::vector<float>(count));
      std::vector<float*> pointers;
      for (int k = 0; k < shards; ++k) {
        for (size_t i = 0; i < count; ++i) data[k][i] = Noise(k, i);
        pointers.push_back(data[k].data());
      }
      SumInRingOrder(pointers.data(), shards, count);
      const std::vector<float> want = Reference(shards, count, WireType::kFloat32);
      ASSERT_TRUE(count == 0 ||
                  std::memcmp(data[0].data(), want.data(), count * sizeof(float)) == 0)
          << shards << " shards, " << count << " floats";
    }
  }
}

TEST(RingAllReduce, SeveralShardsPerRankNeedFloat32OnTheWire) {
  MemoryStore store;
  auto rings = ConnectAll(2, WireType::kBfloat16, store);
  std::vector<float> a(10, 1.0f), b(10, 2.0f);
  float* shards[] = {a.data(), b.data()};
  const Status s =
      rings[0]->SumShards(shards, 2, a.size(), cluster::DeadlineIn(milliseconds(1000)));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("float32"), std::string::npos) << s.message();
}

TEST(RingAllReduce, TwoRanksMatchTheOrderFreeSum) {
  // With two ranks each element is a + b, which is b + a: the ring's result is bitwise the
  // plain sum, as Gloo's is.
  MemoryStore store;
  auto rings = ConnectAll(2, WireType::kFloat32, store);
  std::vector<Status> statuses;
  auto data = SumAll(rings, 50001, &statuses);
  for (size_t i = 0; i < 50001; ++i) ASSERT_EQ(data[1][i], Noise(0, i) + Noise(1, i)) << i;
}

TEST(RingAllReduce, ChunksCoverEveryElementOnce) {
  for (size_t count : {0, 1, 2, 7, 347148}) {
    for (int ranks = 1; ranks <= 9; ++ranks) {
      size_t next = 0;
      for (int c = 0; c < ranks; ++c) {
        const Span s = ChunkOf(count, ranks, c);
        EXPECT_EQ(s.begin, next);
        EXPECT_LE(s.end - s.begin, count / ranks + 1);
        next = s.end;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(RingAllReduce, BfloatRoundsToNearestEven) {
  EXPECT_EQ(ToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(FromBfloat16(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even one, 1.
  EXPECT_EQ(ToBfloat16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(ToBfloat16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(ToBfloat16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isinf(FromBfloat16(ToBfloat16(std::numeric_limits<float>::infinity()))));
  EXPECT_TRUE(std::isnan(FromBfloat16(ToBfloat16(std::numeric_limits<float>::quiet_NaN()))));
  // The largest float rounds to infinity, as a narrowing conversion does.
  EXPECT_TRUE(std::isinf(FromBfloat16(ToBfloat16(std::numeric_limits<float>::max()))));
}

TEST(RingAllReduce, ParsesTheWireTypeOrNamesTheChoices) {
  EXPECT_EQ(*ParseWireType("bfloat16"), WireType::kBfloat16);
  EXPECT_EQ(*ParseWireType("float32"), WireType::kFloat32);
  auto bad = ParseWireType("fp16");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("float32"), std::string::npos);
}

// The published port of `rank` ("ring/<rank>" = "ip port").
int RingPort(MemoryStore& store, int rank) {
  EXPECT_TRUE(store.Wait({"ring/" + std::to_string(rank)}, milliseconds(5000)).ok());
  const std::string published = *store.Get("ring/" + std::to_string(rank));
  return std::stoi(published.substr(published.find(' ') + 1));
}

// Reads the server hello at a fresh connection to `port`; its nonce.
cluster::Nonce ServerNonce(cluster::Socket& s) {
  char hello[cluster::kLinkServerHelloBytes];
  EXPECT_TRUE(s.ReadExactly(hello, sizeof hello, cluster::DeadlineIn(milliseconds(2000))).ok());
  cluster::Nonce n{};
  std::memcpy(n.data(), hello + 10, n.size());
  return n;
}

// Whether the server closes the connection (rather than answering) within `limit`.
bool ClosedWithoutAnswer(cluster::Socket& s, milliseconds limit) {
  char answer[32];
  Status st = s.ReadExactly(answer, sizeof answer, cluster::DeadlineIn(limit));
  return !st.ok() && st.code() != StatusCode::kDeadlineExceeded;
}

TEST(RingAllReduce, StrangersAtTheRingPortAreClosedAndDoNotDelayThePeer) {
  MemoryStore store;
  std::unique_ptr<RingAllReduce> rank0;
  Status status0;
  // Rank 1 of 2 is late. Strangers connect to rank 0's ring port first: silent ones (many,
  // each would hold a sequential acceptor for its whole handshake timeout), garbage, a hello
  // with a wrong key, one of another gang, and one for rank 1 with the right key but for the
  // health channel.
  std::thread t0([&] {
    auto r = RingAllReduce::Connect(store, 0, 2, "127.0.0.1", TestAuth(), WireType::kFloat32,
                                    milliseconds(10000));
    status0 = r.ok() ? Status::Ok() : r.status();
    if (r.ok()) rank0 = std::move(r).value();
  });
  const int port = RingPort(store, 0);
  const auto deadline = cluster::DeadlineIn(milliseconds(2000));
  std::vector<cluster::Socket> silent;
  for (int i = 0; i < 20; ++i) {
    auto s = cluster::ConnectTcp("127.0.0.1", port, deadline);
    ASSERT_TRUE(s.ok());
    silent.push_back(std::move(s).value());
  }
  auto garbage = cluster::ConnectTcp("127.0.0.1", port, deadline);
  ASSERT_TRUE(garbage.ok());
  (void)ServerNonce(*garbage);
  ASSERT_TRUE(garbage->WriteAll("GET / HTTP/1.1\r\n\r\n", 18, deadline).ok());
  EXPECT_TRUE(ClosedWithoutAnswer(*garbage, milliseconds(2000)));
  // Right format, each wrong in one way.
  struct Forged {
    const char* what;
    std::string key;
    int64_t gang;
    cluster::Channel channel;
  };
  for (const Forged& f :
       {Forged{"wrong key", "not-the-key", 7, cluster::Channel::kRing},
        Forged{"older gang", "ring-test-key", 6, cluster::Channel::kRing},
        Forged{"health channel", "ring-test-key", 7, cluster::Channel::kHealth}}) {
    auto s = cluster::ConnectTcp("127.0.0.1", port, deadline);
    ASSERT_TRUE(s.ok());
    cluster::LinkTranscript t;
    t.channel = f.channel;
    t.gang = f.gang;
    t.from_rank = 1;
    t.to_rank = 0;
    t.server_nonce = ServerNonce(*s);
    auto hello = cluster::LinkClientHello(f.key, t);
    ASSERT_TRUE(hello.ok());
    ASSERT_TRUE(s->WriteAll(hello->data(), hello->size(), deadline).ok());
    EXPECT_TRUE(ClosedWithoutAnswer(*s, milliseconds(2000))) << f.what << " got an answer";
  }
  // The real rank 1 joins at once, though 20 silent strangers still hold their handshakes
  // (1 s each): they are served alongside it, not ahead of it.
  const auto start = std::chrono::steady_clock::now();
  auto rank1 = RingAllReduce::Connect(store, 1, 2, "127.0.0.1", TestAuth(), WireType::kFloat32,
                                      milliseconds(10000));
  t0.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(500));
  ASSERT_TRUE(status0.ok()) << status0.message();
  ASSERT_TRUE(rank1.ok()) << rank1.status().message();
  std::vector<std::unique_ptr<RingAllReduce>> rings;
  rings.push_back(std::move(rank0));
  rings.push_back(std::move(rank1).value());
  std::vector<Status> statuses;
  auto data = SumAll(rings, 1000, &statuses);
  ASSERT_TRUE(statuses[0].ok() && statuses[1].ok());
  EXPECT_EQ(data[0][7], Noise(0, 7) + Noise(1, 7));
  // The ring port is closed once the ring is formed.
  EXPECT_FALSE(
      cluster::ConnectTcp("127.0.0.1", port, cluster::DeadlineIn(milliseconds(1000))).ok());
}

TEST(RingAllReduce, ARankOfAnotherGangCannotJoin) {
  MemoryStore store;
  Status status0, status1;
  std::thread t0([&] {
    auto r = RingAllReduce::Connect(store, 0, 2, "127.0.0.1", TestAuth(8), WireType::kFloat32,
                                    milliseconds(1500));
    status0 = r.ok() ? Status::Ok() : r.status();
  });
  auto r1 = RingAllReduce::Connect(store, 1, 2, "127.0.0.1", TestAuth(7), WireType::kFloat32,
                                   milliseconds(1500));
  t0.join();
  ASSERT_FALSE(status0.ok());
  ASSERT_FALSE(r1.ok());
  // Whichever rank reads the other's hello first names the mismatch (on a loaded machine
  // rank 1 may, and close its port before rank 0 gets there).
  const std::string both = status0.message() + "\n" + r1.status().message();
  EXPECT_TRUE(both.find("claims gang 7, this task is of gang 8") != std::string::npos ||
              both.find("claims gang 8, this task is of gang 7") != std::string::npos)
      << both;
}

TEST(RingAllReduce, BroadcastsFromEveryRootAndBarriers) {
  MemoryStore store;
  auto rings = ConnectAll(3, WireType::kFloat32, store);
  for (int root = 0; root < 3; ++root) {
    // Larger than the sockets' buffers, an odd size.
    std::vector<std::vector<uint8_t>> data(3, std::vector<uint8_t>(3 * 1000 * 1000 + 7));
    for (size_t i = 0; i < data[root].size(); ++i)
      data[root][i] = static_cast<uint8_t>(i * 31 + root);
    std::vector<Status> statuses(3);
    std::vector<std::thread> threads;
    threads.reserve(3);
    for (int r = 0; r < 3; ++r) {
      threads.emplace_back([&, r] {
        statuses[r] = rings[r]->Broadcast(data[r].data(), data[r].size(), root,
                                          cluster::DeadlineIn(milliseconds(10000)));
        if (statuses[r].ok())
          statuses[r] = rings[r]->Barrier(cluster::DeadlineIn(milliseconds(10000)));
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].message();
      EXPECT_EQ(data[r], data[root]) << "rank " << r << ", root " << root;
    }
  }
  Status bad = rings[0]->Broadcast(nullptr, 0, 3, cluster::DeadlineIn(milliseconds(100)));
  EXPECT_NE(bad.message().find("no such rank"), std::string::npos) << bad.message();
}

TEST(RingAllReduce, APeerThatNeverJoinsTheSumTimesOut) {
  MemoryStore store;
  auto rings = ConnectAll(2, WireType::kFloat32, store);
  std::vector<float> data(347148, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  Status s = rings[0]->Sum(data.data(), data.size(), cluster::DeadlineIn(milliseconds(500)));
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("timed out"), std::string::npos) << s.message();
  EXPECT_LT(waited, milliseconds(2000));
}

TEST(RingAllReduce, APeerThatGoesAwayFailsTheSumAtOnce) {
  MemoryStore store;
  auto rings = ConnectAll(3, WireType::kFloat32, store);
  rings[2].reset();  // closes rank 2's connections: rank 0 receives from it
  std::vector<float> data(1000, 1.0f);
  Status s = rings[0]->Sum(data.data(), data.size(), cluster::DeadlineIn(milliseconds(10000)));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 2 closed the connection"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tj::collective
