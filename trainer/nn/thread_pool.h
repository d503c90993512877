// A fixed team of threads that runs one function on every member and waits for all of them
// (fork-join). Built for the training step's short parallel phases: members spin briefly
// before sleeping, so a phase starts in microseconds. Run() must be called from one thread
// at a time (the training thread); the function runs on the caller as member 0.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace tj::nn {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }
  // Calls fn(member, size()) on every member, the caller being member 0; returns when all
  // have returned.
  void Run(const std::function<void(int member, int members)>& fn);

 private:
  void Member(int index);

  int size_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

// Splits [0, count) into `parts` contiguous ranges; returns range `part` as [begin, end).
inline std::pair<int, int> SplitRange(int count, int parts, int part) {
  int begin = static_cast<int>(int64_t{count} * part / parts);
  int end = static_cast<int>(int64_t{count} * (part + 1) / parts);
  return {begin, end};
}

}  // namespace tj::nn
