// tj-bench-allreduce: times the all-reduce of one fused gradient buffer between N processes
// on loopback (forked from this one), as the trainer does once per step, and the limits the
// same machine sets in the same run.
//
//   tj-bench-allreduce [--algorithm ring|gloo|tcp|memcpy] [--dtype float32|bfloat16]
//                      [--count 347148] [--ranks 2] [--iterations 200] [--warmup 20]
//
//   ring    ConnectGloo's AllReduceSum over the trainer's ring (the default)
//   gloo    ConnectGloo's AllReduceSum over Gloo's own all-reduce
//   tcp     the limit of loopback TCP: each of 2 processes sends and receives at once the
//           bytes one ring rank sends and receives per all-reduce (2 (N-1)/N of the buffer),
//           on the ring's two connections, without reducing anything
//   memcpy  the limit of memory: one copy of the buffer, in one process
//
// Prints one JSON line from rank 0: median, mean, p10 and p90 milliseconds per call, and the
// bytes one rank moves per call over the median time.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "common/event_log.h"
#include "tests/support/subprocess.h"
#include "trainer/cluster/config/tf_config.h"
#include "trainer/cluster/net/socket.h"
#include "trainer/collective/gloo_communicator.h"

namespace {

struct Flags {
  std::string algorithm = "ring";
  std::string dtype = "float32";
  size_t count = 347148;
  int ranks = 2;
  int iterations = 200;
  int warmup = 20;
};

// Times `call` warmup + iterations times, each after an untimed `prepare`; rank 0 prints the
// figures.
int Measure(
    const Flags& f, int rank, size_t bytes_per_call, const std::function<bool(int)>& call,
    const std::function<void(int)>& prepare = [](int) {}) {
  tj::EventLog log;
  std::vector<double> ms;
  for (int i = 0; i < f.warmup + f.iterations; ++i) {
    prepare(i);
    const auto start = std::chrono::steady_clock::now();
    if (!call(i)) return 75;
    const auto end = std::chrono::steady_clock::now();
    if (i >= f.warmup) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  if (rank != 0) return 0;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1))];
  };
  const std::string backend =
      f.algorithm == "ring" || f.algorithm == "gloo" ? "tj " + f.algorithm : f.algorithm + " limit";
  log.Emit(
      {{"event", "allreduce_bench"},
       {"backend", backend},
       {"dtype", f.algorithm == "ring" ? f.dtype : "float32"},
       {"ranks", f.ranks},
       {"floats", f.count},
       {"iterations", f.iterations},
       {"median_ms", at(0.5)},
       {"mean_ms", std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size())},
       {"p10_ms", at(0.1)},
       {"p90_ms", at(0.9)},
       {"bytes_per_rank", bytes_per_call},
       {"gb_per_s", static_cast<double>(bytes_per_call) / at(0.5) / 1e6}});
  return 0;
}

int RunCommunicator(const Flags& f, const std::vector<std::string>& workers, int rank) {
  tj::EventLog log;
  nlohmann::json j;
  j["cluster"]["worker"] = workers;
  j["task"] = {{"type", "worker"}, {"index", rank}};
  auto config = tj::cluster::ParseTfConfig(j.dump());
  if (!config.ok()) {
    log.Error(config.status().message());
    return 2;
  }
  auto wire = tj::collective::ParseWireType(f.dtype);
  if (!wire.ok()) {
    log.Error(wire.status().message());
    return 2;
  }
  tj::collective::GlooOptions o;
  o.config = *config;
  o.rendezvous_timeout = std::chrono::milliseconds(20000);
  o.identity.job_key = "tj-bench-allreduce";  // the rendezvous requires one; all ranks are ours
  o.log = &log;
  o.ring_allreduce = f.algorithm == "ring";
  o.allreduce_wire = *wire;
  auto comm = tj::collective::ConnectGloo(o);
  if (!comm.ok()) {
    log.Error(comm.status().message());
    return 75;
  }
  std::vector<float> grads(f.count);
  const size_t moved = 2 * (f.count * (f.ranks - 1) / f.ranks) *
                       (*wire == tj::collective::WireType::kBfloat16 ? 2 : 4);
  return Measure(
      f, rank, moved,
      [&](int) {
        tj::Status st = (*comm)->AllReduceSum(grads.data(), grads.size());
        if (!st.ok()) log.Error(st.message());
        return st.ok();
      },
      [&](int i) {
        for (size_t k = 0; k < f.count; ++k) {
          grads[k] = static_cast<float>((k + static_cast<size_t>(i + rank)) % 97) * 1e-3f;
        }
      });
}

// The ring's connections without the ring: each of 2 ranks sends the bytes one ring rank
// sends per all-reduce on its connection to the other, and receives as many on the other's
// connection to it, both at once, each call moving as much as the kernel takes; nothing is
// reduced.
int RunTcp(const Flags& f, const std::vector<int>& ports, int rank) {
  tj::EventLog log;
  const auto deadline = tj::cluster::DeadlineIn(std::chrono::milliseconds(20000));
  auto listener = tj::cluster::ListenTcp("127.0.0.1", ports[rank]);
  if (!listener.ok()) return log.Error(listener.status().message()), 2;
  tj::cluster::Socket out, in;
  while (true) {
    auto c = tj::cluster::ConnectTcp("127.0.0.1", ports[1 - rank], deadline);
    if (c.ok()) {
      out = std::move(c).value();
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) return log.Error(c.status().message()), 2;
    ::usleep(10000);
  }
  auto a = tj::cluster::AcceptTcp(*listener, deadline);
  if (!a.ok() || !a->valid()) return log.Error("no connection from the other rank"), 2;
  in = std::move(a).value();
  int one = 1;
  setsockopt(out.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const size_t bytes = 2 * (f.count / 2) * 4;
  std::vector<uint8_t> send_buf(bytes, 1), recv_buf(bytes);
  return Measure(f, rank, bytes, [&](int) {
    size_t sent = 0, got = 0;
    while (sent < bytes || got < bytes) {
      bool moved = false;
      if (sent < bytes) {
        ssize_t n =
            ::send(out.fd(), send_buf.data() + sent, bytes - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) sent += static_cast<size_t>(n), moved = true;
        if (n < 0 && errno != EAGAIN) return false;
      }
      if (got < bytes) {
        ssize_t n = ::recv(in.fd(), recv_buf.data() + got, bytes - got, MSG_DONTWAIT);
        if (n == 0) return false;
        if (n > 0) got += static_cast<size_t>(n), moved = true;
        if (n < 0 && errno != EAGAIN) return false;
      }
      if (!moved) {
        pollfd p[2] = {{in.fd(), static_cast<short>(got < bytes ? POLLIN : 0), 0},
                       {out.fd(), static_cast<short>(sent < bytes ? POLLOUT : 0), 0}};
        ::poll(p, 2, 1000);
      }
    }
    return true;
  });
}

int RunMemcpy(const Flags& f) {
  std::vector<float> a(f.count, 1.0f), b(f.count);
  return Measure(f, 0, f.count * 4, [&](int i) {
    std::memcpy(b.data(), a.data(), f.count * 4);
    a[static_cast<size_t>(i) % f.count] = b[(static_cast<size_t>(i) * 7) % f.count];
    return true;
  });
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"All-reduce of the trainer's fused gradients between processes on loopback"};
  app.add_option("--algorithm", f.algorithm, "ring | gloo | tcp | memcpy")
      ->check(CLI::IsMember({"ring", "gloo", "tcp", "memcpy"}));
  app.add_option("--dtype", f.dtype, "float32 | bfloat16 (ring only)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  app.add_option("--count", f.count, "Floats per all-reduce");
  app.add_option("--ranks", f.ranks, "Processes")->check(CLI::Range(1, 64));
  app.add_option("--iterations", f.iterations, "Timed calls")->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", f.warmup, "Untimed calls first")->check(CLI::Range(0, 1000000));
  CLI11_PARSE(app, argc, argv);
  if (f.algorithm == "memcpy") return RunMemcpy(f);
  if (f.algorithm == "tcp") f.ranks = 2;
  std::vector<std::string> workers;
  workers.reserve(static_cast<size_t>(f.ranks));
  for (int r = 0; r < f.ranks; ++r) {
    workers.push_back("127.0.0.1:" + std::to_string(tj::testing::FreePort()));
  }
  const std::vector<int> tcp_ports{tj::testing::FreePort(), tj::testing::FreePort()};
  auto run = [&](int rank) {
    return f.algorithm == "tcp" ? RunTcp(f, tcp_ports, rank) : RunCommunicator(f, workers, rank);
  };
  std::vector<pid_t> children;
  for (int r = 1; r < f.ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(run(r));
    children.push_back(pid);
  }
  int rc = run(0);
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = rc ? rc : 1;
  }
  return rc;
}
