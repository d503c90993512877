// tj-collective-test-peer: one process of a collective, for the integration tests. Connects
// with ConnectGloo from TF_CONFIG (env) and the flags below, then all-reduces and prints one
// JSON event per line on stdout. Exits 0 on success, 75 when the rendezvous or a collective
// fails (the message on stderr), 2 on bad usage.
//
//   --count N            floats per all-reduce (default 1000)
//   --iterations K       all-reduces to run (default 3)
//   --sleep-ms S         pause between all-reduces (to give a test time to act; default 0)
//   --algorithm ring|gloo  the all-reduce (default ring, the trainer's)
//   --rendezvous-timeout-ms, --collective-timeout-ms, --key KEY

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/event_log.h"
#include "common/sha256.h"
#include "tests/support/noise.h"
#include "trainer/cluster/config/tf_config.h"
#include "trainer/collective/gloo_communicator.h"

using ::tj::testing::Noise;

int main(int argc, char** argv) {
  size_t count = 1000;
  int iterations = 3;
  int sleep_ms = 0;
  tj::collective::GlooOptions options;
  options.rendezvous_timeout = std::chrono::milliseconds(5000);
  options.collective_timeout = std::chrono::milliseconds(5000);
  options.io_timeout = std::chrono::milliseconds(2000);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--count") {
      count = std::stoul(value);
    } else if (flag == "--iterations") {
      iterations = std::stoi(value);
    } else if (flag == "--sleep-ms") {
      sleep_ms = std::stoi(value);
    } else if (flag == "--rendezvous-timeout-ms") {
      options.rendezvous_timeout = std::chrono::milliseconds(std::stoi(value));
    } else if (flag == "--collective-timeout-ms") {
      options.collective_timeout = std::chrono::milliseconds(std::stoi(value));
    } else if (flag == "--algorithm") {
      options.ring_allreduce = value == "ring";
    } else if (flag == "--key") {
      options.identity.job_key = value;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  tj::EventLog log;
  const char* tf_config = std::getenv("TF_CONFIG");
  if (tf_config == nullptr) {
    log.Error("TF_CONFIG is not set");
    return 2;
  }
  tj::StatusOr<tj::cluster::TfConfig> config = tj::cluster::ParseTfConfig(tf_config);
  if (!config.ok()) {
    log.Error(config.status().message());
    return 2;
  }
  options.config = *config;
  options.log = &log;
  auto comm = tj::collective::ConnectGloo(options);
  if (!comm.ok()) {
    log.Error(comm.status().message());
    return 75;
  }
  tj::collective::Communicator& c = **comm;
  log.Emit({{"event", "connected"}, {"rank", c.rank()}, {"size", c.size()}});

  for (int it = 0; it < iterations; ++it) {
    // Exact part: small integers, whose sum is exact in any order.
    std::vector<float> exact(count);
    for (size_t i = 0; i < count; ++i) exact[i] = static_cast<float>((c.rank() + 1) * (i % 1000));
    // Order-sensitive part: every rank must still end with the same bits.
    std::vector<float> noisy(count);
    for (size_t i = 0; i < count; ++i) noisy[i] = Noise(c.rank() + it, i);
    tj::Status st = c.AllReduceSum(exact.data(), exact.size());
    if (st.ok()) st = c.AllReduceSum(noisy.data(), noisy.size());
    if (!st.ok()) {
      log.Error(st.message());
      return 75;
    }
    const int n = c.size();
    bool is_exact = true;
    const size_t rank_sum = n * (n + 1) / 2;  // 1 + 2 + ... + n, exact in integers
    for (size_t i = 0; i < count; ++i) {
      if (exact[i] != static_cast<float>(rank_sum * (i % 1000))) is_exact = false;
    }
    const tj::Digest digest = tj::Sha256Of(noisy.data(), noisy.size() * sizeof(float));
    log.Emit({{"event", "allreduce"},
              {"iteration", it},
              {"exact", is_exact},
              {"noisy_sha256", tj::ToHex(digest)}});
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  }
  // Broadcast from the last rank, then a barrier, so both are exercised.
  std::vector<int32_t> b(16, c.rank() == c.size() - 1 ? 42 : -1);
  tj::Status st = c.Broadcast(b.data(), b.size() * sizeof(int32_t), c.size() - 1);
  if (st.ok()) st = c.Barrier();
  if (!st.ok()) {
    log.Error(st.message());
    return 75;
  }
  log.Emit({{"event", "done"}, {"broadcast_ok", b[0] == 42 && b[15] == 42}});
  return 0;
}
