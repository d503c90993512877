#include "trainer/collective/gloo_communicator.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/socket.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "trainer/cluster/rendezvous.h"
#include "trainer/cluster/socket.h"
#include "trainer/collective/peer_health.h"

namespace tj::collective {
namespace {

using cluster::TfConfig;

std::string Seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// Time kept back from each collective's timeout to probe the peers after a failure, so the
// whole failure is reported within the collective timeout.
std::chrono::milliseconds ProbeTimeout(std::chrono::milliseconds collective_timeout) {
  return std::clamp(collective_timeout / 10, std::chrono::milliseconds(100),
                    std::chrono::milliseconds(1000));
}
std::chrono::milliseconds OpTimeout(std::chrono::milliseconds collective_timeout) {
  return std::max(collective_timeout - ProbeTimeout(collective_timeout),
                  std::chrono::milliseconds(1));
}

std::string Peer(const TfConfig& c, int rank) {
  return c.TaskNameOfRank(rank) + " (" + c.AddressOfRank(rank) + ")";
}

// Gloo's rendezvous store on top of ours. Gloo's keys carry the ranks ("0", "rank_1", ...),
// which name the missing tasks when a peer does not arrive. Errors are thrown (Gloo's interface has
// no other way) and caught in ConnectGloo.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(cluster::KeyValueStore& kv, const TfConfig& config, std::chrono::milliseconds timeout)
      : kv_(kv), config_(config), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Status st = kv_.Set(kPrefix + key, std::string(data.begin(), data.end()));
    if (!st.ok()) throw std::runtime_error(st.message());
  }

  // Gloo expects get() to block until the key is set (as its FileStore and HashStore do).
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    StatusOr<std::string> v = kv_.Get(kPrefix + key);
    if (!v.ok()) throw std::runtime_error(v.status().message());
    return std::vector<char>(v->begin(), v->end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(kPrefix + k);
    Status st = kv_.Wait(full, t);
    if (st.ok()) return;
    // Name the tasks that did not arrive (Gloo's keys are their ranks).
    std::string missing;
    for (const auto& k : keys) {
      if (kv_.Get(kPrefix + k).ok()) continue;
      int rank = -1;
      try {
        rank = std::stoi(k.rfind("rank_", 0) == 0 ? k.substr(5) : k);
      } catch (const std::exception&) {
      }
      std::string name =
          (rank >= 0 && rank < config_.collective_size()) ? Peer(config_, rank) : "key " + k;
      missing += (missing.empty() ? "" : ", ") + name;
    }
    if (missing.empty()) throw std::runtime_error(st.message());
    throw std::runtime_error("peer " + missing + " did not arrive at the rendezvous within " +
                             Seconds(t) + " (" + st.message() + ")");
  }

 private:
  static constexpr const char* kPrefix = "gloo/";
  cluster::KeyValueStore& kv_;
  const TfConfig& config_;
  std::chrono::milliseconds timeout_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& o, std::unique_ptr<cluster::Rendezvous> rendezvous,
                   std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::rendezvous::Context> context,
                   std::unique_ptr<PeerHealthResponder> responder,
                   std::map<int, std::string> peer_health_addresses,
                   std::unique_ptr<RingAllReduce> ring)
      : options_(o),
        rendezvous_(std::move(rendezvous)),
        device_(std::move(device)),
        context_(std::move(context)),
        responder_(std::move(responder)),
        peer_health_addresses_(std::move(peer_health_addresses)),
        ring_(std::move(ring)) {}

  ~GlooCommunicator() override {
    // Context before device; the rendezvous (the chief's server) goes last.
    context_.reset();
    device_.reset();
  }

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  Status AllReduceSum(float* data, size_t count) override {
    if (!broken_.ok()) return broken_;
    if (ring_) {
      Status s =
          ring_->Sum(data, count, cluster::DeadlineIn(OpTimeout(options_.collective_timeout)));
      if (s.ok()) return s;
      return Broken("all-reduce of " + std::to_string(count) + " floats",
                    std::runtime_error(s.message()));
    }
    try {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(NextTag());
      opts.setTimeout(OpTimeout(options_.collective_timeout));
      gloo::allreduce(opts);
    } catch (const std::exception& e) {
      return Broken("all-reduce of " + std::to_string(count) + " floats", e);
    }
    return Status::Ok();
  }

  Status Broadcast(void* data, size_t bytes, int root) override {
    if (!broken_.ok()) return broken_;
    if (root < 0 || root >= size()) {
      return Status::Error("broadcast from rank " + std::to_string(root) + ": no such rank (size " +
                           std::to_string(size()) + ")");
    }
    try {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(data), bytes);
      opts.setRoot(root);
      opts.setTag(NextTag());
      opts.setTimeout(OpTimeout(options_.collective_timeout));
      gloo::broadcast(opts);
    } catch (const std::exception& e) {
      return Broken(
          "broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root), e);
    }
    return Status::Ok();
  }

  Status Barrier() override {
    if (!broken_.ok()) return broken_;
    try {
      gloo::BarrierOptions opts(context_);
      opts.setTag(NextTag());
      opts.setTimeout(OpTimeout(options_.collective_timeout));
      gloo::barrier(opts);
    } catch (const std::exception& e) {
      return Broken("barrier", e);
    }
    return Status::Ok();
  }

 private:
  uint32_t NextTag() { return tag_++; }

  // Turns a Gloo exception into the error every later call returns, naming the peer(s):
  // probes every peer's health responder to tell the dead and the hung from the alive.
  Status Broken(const std::string& op, const std::exception& e) {
    const std::string what = e.what();
    const TfConfig& c = options_.config;
    std::map<int, PeerState> states;
    {
      std::vector<std::thread> probes;
      std::mutex mu;
      for (const auto& [rank, address] : peer_health_addresses_) {
        probes.emplace_back([&, rank = rank, address = address] {
          PeerState s = ProbePeer(address, ProbeTimeout(options_.collective_timeout));
          std::lock_guard<std::mutex> lock(mu);
          states[rank] = s;
        });
      }
      for (auto& t : probes) t.join();
    }
    auto list = [&](PeerState wanted) {
      std::string s;
      for (const auto& [rank, state] : states) {
        if (state == wanted) s += (s.empty() ? "" : ", ") + Peer(c, rank);
      }
      return s;
    };
    const std::string gone = list(PeerState::kGone);
    const std::string hung = list(PeerState::kNotResponding);
    const bool timed_out = what.find("imed out") != std::string::npos;
    std::string message = op + " failed: ";
    if (!gone.empty()) {
      message += "lost peer " + gone + " (its process is gone)";
      if (!hung.empty()) message += "; peer " + hung + " does not respond";
    } else if (!hung.empty()) {
      message += "peer " + hung + " does not respond (hung, stopped or unreachable)";
      if (timed_out) {
        message += "; no progress within the collective timeout of " +
                   Seconds(options_.collective_timeout);
      }
    } else {
      std::string all;
      for (int r = 0; r < size(); ++r) {
        if (r != rank()) all += (all.empty() ? "" : ", ") + Peer(c, r);
      }
      message += timed_out ? "no progress within the collective timeout of " +
                                 Seconds(options_.collective_timeout) +
                                 "; every peer still answers (" + all + "): one is too slow"
                           : "a connection to a peer broke (peers: " + all + ")";
    }
    message += " [gloo: " + what + "]";
    broken_ = Status::Error(message);
    return broken_;
  }

  GlooOptions options_;
  std::unique_ptr<cluster::Rendezvous> rendezvous_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::unique_ptr<PeerHealthResponder> responder_;
  std::map<int, std::string> peer_health_addresses_;  // rank -> "host:port" of its responder
  std::unique_ptr<RingAllReduce> ring_;               // null: Gloo's all-reduce
  uint32_t tag_ = 0;
  Status broken_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const GlooOptions& o) {
  const TfConfig& c = o.config;
  if (!c.in_collective()) {
    return Status::Error("connecting the collective: " + c.task_name() +
                         " takes no part in it (only chief and workers train)");
  }
  if (o.log == nullptr) return Status::Error("ConnectGloo: GlooOptions.log is required");
  if (c.collective_size() == 1) return MakeSingleProcessCommunicator();
  std::signal(SIGPIPE, SIG_IGN);

  const std::string me = c.task_name() + " (" + c.own_address() + ")";
  cluster::RendezvousOptions ro = cluster::RendezvousOptionsFor(c);
  ro.key = o.rendezvous_key;
  ro.bind_host = o.rendezvous_bind_host;
  ro.rendezvous_timeout = o.rendezvous_timeout;
  ro.io_timeout = o.io_timeout;
  ro.log = o.log;
  StatusOr<std::unique_ptr<cluster::Rendezvous>> rendezvous = cluster::Rendezvous::Join(ro);
  if (!rendezvous.ok()) return rendezvous.status();

  StatusOr<cluster::HostPort> own = cluster::ParseHostPort(c.own_address(), "own address");
  if (!own.ok()) return own.status();
  StatusOr<std::string> ip =
      cluster::ResolveOwnHostBefore(own->host, cluster::DeadlineIn(o.rendezvous_timeout));
  if (!ip.ok()) {
    return ip.status().WithContext("connecting the collective as " + me +
                                   ": cannot resolve this task's own TF_CONFIG host");
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = *ip;
    attr.ai_family = ip->find(':') != std::string::npos ? AF_INET6 : AF_INET;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(c.rank(), c.collective_size());
    // Peers may arrive up to the rendezvous timeout apart; collectives get their own timeout.
    context->setTimeout(o.rendezvous_timeout);
    cluster::KeyValueStore& kv = (*rendezvous)->store();
    StatusOr<std::unique_ptr<PeerHealthResponder>> responder = PeerHealthResponder::Start(*ip);
    if (!responder.ok()) return responder.status();
    const std::string health_prefix = "health/";
    TJ_RETURN_IF_ERROR(kv.Set(health_prefix + std::to_string(c.rank()), (*responder)->address()));
    GlooStore store(kv, c, o.rendezvous_timeout);
    context->connectFullMesh(store, device);
    context->setTimeout(OpTimeout(o.collective_timeout));
    // Every rank published its responder before its Gloo addresses, so these are set by now.
    std::map<int, std::string> peers;
    for (int r = 0; r < c.collective_size(); ++r) {
      if (r == c.rank()) continue;
      const std::string key = health_prefix + std::to_string(r);
      TJ_RETURN_IF_ERROR(kv.Wait({key}, o.io_timeout));
      StatusOr<std::string> address = kv.Get(key);
      if (!address.ok()) return address.status();
      peers[r] = *address;
    }
    std::unique_ptr<RingAllReduce> ring;
    if (o.ring_allreduce) {
      StatusOr<std::unique_ptr<RingAllReduce>> r = RingAllReduce::Connect(
          kv, c.rank(), c.collective_size(), *ip, o.allreduce_wire, o.rendezvous_timeout);
      if (!r.ok()) return r.status().WithContext("connecting the collective as " + me);
      ring = std::move(r).value();
    } else if (o.allreduce_wire != WireType::kFloat32) {
      return Status::Error("Gloo's own all-reduce sends float32 only; use the ring for " +
                           std::string(WireTypeName(o.allreduce_wire)));
    }
    return std::unique_ptr<Communicator>(new GlooCommunicator(
        o, std::move(rendezvous).value(), std::move(device), std::move(context),
        std::move(responder).value(), std::move(peers), std::move(ring)));
  } catch (const std::exception& e) {
    return Status::Error("connecting the collective as " + me + " (rank " +
                         std::to_string(c.rank()) + " of " + std::to_string(c.collective_size()) +
                         "): " + e.what());
  }
}

}  // namespace tj::collective
