// tj-bench-allreduce: times ConnectGloo's AllReduceSum of one fused gradient buffer between
// N processes on loopback (forked from this one), as the trainer does once per step.
//
//   tj-bench-allreduce [--count 347148] [--ranks 2] [--iterations 200] [--warmup 20]
//
// Prints one JSON line from rank 0: median, mean, p10 and p90 milliseconds per all-reduce.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "common/event_log.h"
#include "trainer/cluster/tf_config.h"
#include "trainer/collective/gloo_communicator.h"

namespace {

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  return ok ? ntohs(a.sin_port) : 0;
}

int RunRank(const std::vector<std::string>& workers, int rank, size_t count, int iterations,
            int warmup) {
  tj::EventLog log;
  nlohmann::json j;
  j["cluster"]["worker"] = workers;
  j["task"] = {{"type", "worker"}, {"index", rank}};
  auto config = tj::cluster::ParseTfConfig(j.dump());
  if (!config.ok()) {
    log.Error(config.status().message());
    return 2;
  }
  tj::collective::GlooOptions o;
  o.config = *config;
  o.rendezvous_timeout = std::chrono::milliseconds(20000);
  o.rendezvous_key = "tj-bench-allreduce";  // the rendezvous requires one; all ranks are ours
  o.log = &log;
  auto comm = tj::collective::ConnectGloo(o);
  if (!comm.ok()) {
    log.Error(comm.status().message());
    return 75;
  }
  std::vector<float> grads(count);
  std::vector<double> ms;
  for (int i = 0; i < warmup + iterations; ++i) {
    for (size_t k = 0; k < count; ++k) grads[k] = static_cast<float>((k + i + rank) % 97) * 1e-3f;
    const auto start = std::chrono::steady_clock::now();
    tj::Status st = (*comm)->AllReduceSum(grads.data(), grads.size());
    const auto end = std::chrono::steady_clock::now();
    if (!st.ok()) {
      log.Error(st.message());
      return 75;
    }
    if (i >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  if (rank == 0) {
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) { return ms[static_cast<size_t>(q * (ms.size() - 1))]; };
    log.Emit({{"event", "allreduce_bench"},
              {"backend", "tj gloo"},
              {"ranks", static_cast<int>(workers.size())},
              {"floats", count},
              {"iterations", iterations},
              {"median_ms", at(0.5)},
              {"mean_ms", std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size()},
              {"p10_ms", at(0.1)},
              {"p90_ms", at(0.9)}});
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = 347148;
  int ranks = 2, iterations = 200, warmup = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long v = std::stol(argv[i + 1]);
    if (flag == "--count") {
      count = static_cast<size_t>(v);
    } else if (flag == "--ranks") {
      ranks = static_cast<int>(v);
    } else if (flag == "--iterations") {
      iterations = static_cast<int>(v);
    } else if (flag == "--warmup") {
      warmup = static_cast<int>(v);
    } else {
      std::fprintf(stderr, "usage: %s [--count N] [--ranks R] [--iterations I] [--warmup W]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<std::string> workers;
  workers.reserve(ranks);
  for (int r = 0; r < ranks; ++r) workers.push_back("127.0.0.1:" + std::to_string(FreePort()));
  std::vector<pid_t> children;
  for (int r = 1; r < ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(RunRank(workers, r, count, iterations, warmup));
    children.push_back(pid);
  }
  int rc = RunRank(workers, 0, count, iterations, warmup);
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = rc ? rc : 1;
  }
  return rc;
}
