// Test support: rings of ring_allreduce.h between threads of one process, over real loopback
// TCP connections, found through an in-memory rendezvous store. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainer/cluster/rendezvous/key_value_store.h"
#include "trainer/collective/ring_allreduce.h"

namespace tj::testing {

// The rendezvous store of one process: what the ranks publish, read by the others.
class MemoryStore final : public cluster::KeyValueStore {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    cv_.notify_all();
    return Status::Ok();
  }
  StatusOr<std::string> Get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    if (it == values_.end()) return Status::Error("no key " + key);
    return it->second;
  }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    const bool all = cv_.wait_for(lock, timeout, [&] {
      for (const auto& k : keys) {
        if (values_.count(k) == 0) return false;
      }
      return true;
    });
    return all ? Status::Ok() : Status::Error("keys not set in time");
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

// Connects `ranks` rings through `store` with `auth`, one thread per rank; a rank that could
// not connect fails the test and is null.
inline std::vector<std::unique_ptr<collective::RingAllReduce>> ConnectLoopbackRings(
    int ranks, collective::WireType wire, MemoryStore& store, const collective::RingAuth& auth) {
  std::vector<std::unique_ptr<collective::RingAllReduce>> rings(ranks);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(ranks));
  std::vector<Status> errors(ranks);
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto ring = collective::RingAllReduce::Connect(store, r, ranks, "127.0.0.1", auth, wire,
                                                     std::chrono::milliseconds(10000));
      if (ring.ok()) {
        rings[r] = std::move(ring).value();
      } else {
        errors[r] = ring.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_TRUE(errors[r].ok()) << r << ": " << errors[r].message();
  return rings;
}

}  // namespace tj::testing
