#include "trainer/nn/thread_pool.h"

#include <immintrin.h>

namespace tj::nn {
namespace {
constexpr int kSpinIterations = 20000;  // ~50-100 us of spinning before sleeping
}

ThreadPool::ThreadPool(int threads) : size_(threads < 1 ? 1 : threads) {
  for (int i = 1; i < size_; ++i) threads_.emplace_back([this, i] { Member(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (size_ == 1) {
    fn(0, 1);
    return;
  }
  task_ = &fn;
  pending_.store(size_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  fn(0, size_);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      _mm_pause();
    } else {
      int p = pending_.load(std::memory_order_acquire);
      if (p != 0) pending_.wait(p, std::memory_order_acquire);
    }
  }
}

void ThreadPool::Member(int index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t g;
    for (int spin = 0; (g = generation_.load(std::memory_order_acquire)) == seen; ++spin) {
      if (spin < kSpinIterations) {
        _mm_pause();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
    }
    seen = g;
    if (stop_.load()) return;
    (*task_)(index, size_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace tj::nn
