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

#include "common/duration_text.h"
#include "trainer/cluster/config/host_port.h"
#include "trainer/cluster/net/socket.h"
#include "trainer/cluster/rendezvous/rendezvous.h"
#include "trainer/collective/peer_health.h"

namespace tj::collective {
namespace {

using cluster::TfConfig;

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
      : store_(kv), config_(config), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Status st = store_.Set(kPrefix + key, std::string(data.begin(), data.end()));
    if (!st.ok()) throw std::runtime_error(st.message());
  }

  // Gloo expects get() to block until the key is set (as its FileStore and HashStore do).
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    StatusOr<std::string> v = store_.Get(kPrefix + key);
    if (!v.ok()) throw std::runtime_error(v.status().message());
    return std::vector<char>(v->begin(), v->end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(kPrefix + k);
    Status st = store_.Wait(full, t);
    if (st.ok()) return;
    // Name the tasks that did not arrive (Gloo's keys are their ranks).
    std::string missing;
    for (const auto& k : keys) {
      if (store_.Get(kPrefix + k).ok()) continue;
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
                             FormatSeconds(t) + " (" + st.message() + ")");
  }

 private:
  static constexpr const char* kPrefix = "gloo/";
  cluster::KeyValueStore& store_;
  const TfConfig& config_;
  std::chrono::milliseconds timeout_;
};

// Gloo's full mesh, only with --allreduce-algorithm gloo (its pairs are not authenticated).
struct GlooMesh {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& o, std::unique_ptr<PeerHealthResponder> responder,
                   std::map<int, std::string> peer_health_addresses,
                   std::unique_ptr<RingAllReduce> ring, GlooMesh gloo)
      : options_(o),
        device_(std::move(gloo.device)),
        context_(std::move(gloo.context)),
        responder_(std::move(responder)),
        peer_health_addresses_(std::move(peer_health_addresses)),
        ring_(std::move(ring)) {}

  ~GlooCommunicator() override {
    // Context before device.
    context_.reset();
    device_.reset();
  }

  int rank() const override { return ring_->rank(); }
  int size() const override { return ring_->size(); }

  Status AllReduceSum(float* data, size_t count) override {
    if (!broken_.ok()) return broken_;
    if (!context_) {
      Status s =
          ring_->Sum(data, count, cluster::DeadlineIn(OpTimeout(options_.collective_timeout)));
      if (s.ok()) return s;
      return Broken("all-reduce of " + std::to_string(count) + " floats", s.message(), "ring");
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
      return Broken("all-reduce of " + std::to_string(count) + " floats", e.what(), "gloo");
    }
    return Status::Ok();
  }

  Status AllReduceShardsSum(float* const* shards, int shards_per_rank, size_t count) override {
    if (!broken_.ok()) return broken_;
    if (context_) return Communicator::AllReduceShardsSum(shards, shards_per_rank, count);
    // A caller's error moves nothing: the ring is still fine.
    const bool callers_error =
        shards_per_rank < 1 || (shards_per_rank > 1 && ring_->wire() != WireType::kFloat32);
    Status s = ring_->SumShards(shards, shards_per_rank, count,
                                cluster::DeadlineIn(OpTimeout(options_.collective_timeout)));
    if (s.ok() || callers_error) return s;
    return Broken("all-reduce of " + std::to_string(shards_per_rank) + " shards of " +
                      std::to_string(count) + " floats",
                  s.message(), "ring");
  }

  Status Broadcast(void* data, size_t bytes, int root) override {
    if (!broken_.ok()) return broken_;
    Status s = ring_->Broadcast(data, bytes, root,
                                cluster::DeadlineIn(OpTimeout(options_.collective_timeout)));
    if (s.ok()) return s;
    if (root < 0 || root >= size()) return s;  // a caller's error: the ring is still fine
    return Broken(
        "broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root),
        s.message(), "ring");
  }

  Status Barrier() override {
    if (!broken_.ok()) return broken_;
    Status s = ring_->Barrier(cluster::DeadlineIn(OpTimeout(options_.collective_timeout)));
    if (s.ok()) return s;
    return Broken("barrier", s.message(), "ring");
  }

 private:
  uint32_t NextTag() { return tag_++; }

  // Turns a failure (`what`, from `source`: "ring" or "gloo") into the error every later call
  // returns, naming the peer(s): probes every peer's health responder to tell the dead and the
  // hung from the alive.
  Status Broken(const std::string& op, const std::string& what, const char* source) {
    const TfConfig& c = options_.config;
    std::map<int, PeerState> states;
    {
      std::vector<std::thread> probes;
      std::mutex mu;
      const int self = rank();
      for (const auto& [peer, address] : peer_health_addresses_) {
        probes.emplace_back([&, peer = peer, address = address] {
          PeerState s = ProbePeer(address, self, peer, options_.identity,
                                  ProbeTimeout(options_.collective_timeout));
          std::lock_guard<std::mutex> lock(mu);
          states[peer] = s;
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
    const std::string busy = list(PeerState::kBusy);
    const bool timed_out = what.find("imed out") != std::string::npos;
    std::string message = op + " failed: ";
    if (!gone.empty()) {
      message += "lost peer " + gone + " (its process is gone)";
      if (!hung.empty()) message += "; peer " + hung + " does not respond";
    } else if (!busy.empty()) {
      // Its responder closed every probe unanswered: strangers at its port, not a lost peer.
      message += "peer " + busy +
                 " could not be probed (its health port closed every probe unanswered: a flood "
                 "of connections there?), so it is not known to be lost";
      if (!hung.empty()) message += "; peer " + hung + " does not respond";
    } else if (!hung.empty()) {
      message += "peer " + hung + " does not respond (hung, stopped or unreachable)";
      if (timed_out) {
        message += "; no progress within the collective timeout of " +
                   FormatSeconds(options_.collective_timeout);
      }
    } else {
      std::string all;
      for (int r = 0; r < size(); ++r) {
        if (r != rank()) all += (all.empty() ? "" : ", ") + Peer(c, r);
      }
      message += timed_out ? "no progress within the collective timeout of " +
                                 FormatSeconds(options_.collective_timeout) +
                                 "; every peer still answers (" + all + "): one is too slow"
                           : "a connection to a peer broke (peers: " + all + ")";
    }
    message += std::string(" [") + source + ": " + what + "]";
    broken_ = Status::Error(message);
    return broken_;
  }

  GlooOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;     // null unless Gloo's all-reduce
  std::shared_ptr<gloo::rendezvous::Context> context_;  // null unless Gloo's all-reduce
  std::unique_ptr<PeerHealthResponder> responder_;
  std::map<int, std::string> peer_health_addresses_;  // rank -> "host:port" of its responder
  std::unique_ptr<RingAllReduce> ring_;               // always: broadcasts, barriers
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
  ro.identity = o.identity;
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
  if (!o.ring_allreduce && o.allreduce_wire != WireType::kFloat32) {
    return Status::Error("Gloo's own all-reduce sends float32 only; use the ring for " +
                         std::string(WireTypeName(o.allreduce_wire)));
  }
  cluster::KeyValueStore& kv = (*rendezvous)->store();
  StatusOr<std::unique_ptr<PeerHealthResponder>> responder =
      PeerHealthResponder::Start(*ip, c.rank(), o.identity, o.log);
  if (!responder.ok()) return responder.status();
  const std::string health_prefix = "health/";
  TJ_RETURN_IF_ERROR(kv.Set(health_prefix + std::to_string(c.rank()), (*responder)->address()));
  // A rank has arrived once it has published its responder. The ring forms as soon as each
  // rank's neighbours are there; then every rank's responder address is read (all arrived).
  std::vector<std::string> health_keys;
  health_keys.reserve(static_cast<size_t>(c.collective_size()));
  for (int r = 0; r < c.collective_size(); ++r) {
    health_keys.push_back(health_prefix + std::to_string(r));
  }
  auto missing_peers = [&](const Status& why) {
    std::string missing;
    for (int r = 0; r < c.collective_size(); ++r) {
      if (!kv.Get(health_keys[r]).ok()) missing += (missing.empty() ? "" : ", ") + Peer(c, r);
    }
    if (missing.empty()) return why.WithContext("connecting the collective as " + me);
    return Status::Error("connecting the collective as " + me + ": peer " + missing +
                         " did not arrive at the rendezvous within " +
                         FormatSeconds(o.rendezvous_timeout) + " (" + why.message() + ")");
  };
  RingAuth ring_auth;
  ring_auth.identity = o.identity;
  ring_auth.log = o.log;
  StatusOr<std::unique_ptr<RingAllReduce>> ring = RingAllReduce::Connect(
      kv, c.rank(), c.collective_size(), *ip, ring_auth, o.allreduce_wire, o.rendezvous_timeout);
  if (!ring.ok()) return missing_peers(ring.status());
  if (Status st = kv.Wait(health_keys, o.rendezvous_timeout); !st.ok()) return missing_peers(st);
  std::map<int, std::string> peers;
  for (int r = 0; r < c.collective_size(); ++r) {
    StatusOr<std::string> address = kv.Get(health_keys[r]);
    if (!address.ok()) return address.status();
    if (r != c.rank()) peers[r] = *address;
  }
  GlooMesh gloo;
  if (!o.ring_allreduce) {
    o.log->Warn(
        "--allreduce-algorithm gloo: Gloo's pair sockets do not authenticate their peers: "
        "anything that reaches this task's ports while the mesh forms can take a peer's place "
        "or stop the job. Use it to compare against the ring, not in shared networks");
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = *ip;
      attr.ai_family = ip->find(':') != std::string::npos ? AF_INET6 : AF_INET;
      gloo.device = gloo::transport::tcp::CreateDevice(attr);
      gloo.context = std::make_shared<gloo::rendezvous::Context>(c.rank(), c.collective_size());
      // Peers may arrive up to the rendezvous timeout apart; collectives get their own timeout.
      gloo.context->setTimeout(o.rendezvous_timeout);
      GlooStore store(kv, c, o.rendezvous_timeout);
      gloo.context->connectFullMesh(store, gloo.device);
      gloo.context->setTimeout(OpTimeout(o.collective_timeout));
    } catch (const std::exception& e) {
      return Status::Error("connecting Gloo's mesh as " + me + " (rank " +
                           std::to_string(c.rank()) + " of " + std::to_string(c.collective_size()) +
                           "): " + e.what());
    }
  }
  // Every rank is done with the store once all are past this barrier: the chief's rendezvous
  // port closes then instead of staying open to the pod network for the whole run. Nothing
  // joins later: a task that restarts restarts its whole gang, which forms anew under its new
  // chief (a task of another gang is refused anyway).
  if (Status st = (*ring)->Barrier(cluster::DeadlineIn(o.rendezvous_timeout)); !st.ok()) {
    return st.WithContext("connecting the collective as " + me +
                          ": every rank past the rendezvous");
  }
  rendezvous->reset();
  return std::unique_ptr<Communicator>(new GlooCommunicator(
      o, std::move(responder).value(), std::move(peers), std::move(ring).value(), std::move(gloo)));
}

}  // namespace tj::collective
