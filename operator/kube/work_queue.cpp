#include "operator/kube/work_queue.h"

#include <algorithm>

namespace tj::kube {

namespace {
constexpr auto kPollPeriod = std::chrono::milliseconds(20);
}

WorkQueue::WorkQueue(Clock* clock, Clock::Duration base_delay, Clock::Duration max_delay)
    : clock_(clock), backoff_(base_delay, max_delay) {}

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_) return;
  if (dirty_.count(key)) return;  // already queued (or to be re-queued at Done)
  ++adds_;
  dirty_.insert(key);
  if (processing_.count(key)) return;  // Done() queues it
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::Add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, Clock::Duration delay) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return;
  if (delay <= Clock::Duration::zero()) {
    AddLocked(key);
    return;
  }
  auto at = clock_->Now() + delay;
  auto it = waiting_.find(key);
  if (it == waiting_.end() || at < it->second) waiting_[key] = at;  // the earlier time wins
  cv_.notify_all();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  auto delay = backoff_.When(key);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++retries_;
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) { backoff_.Forget(key); }
int WorkQueue::NumRequeues(const std::string& key) const { return backoff_.NumRequeues(key); }

void WorkQueue::PromoteReadyLocked() {
  if (waiting_.empty()) return;
  auto now = clock_->Now();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second <= now) {
      std::string key = it->first;
      it = waiting_.erase(it);
      AddLocked(key);
    } else {
      ++it;
    }
  }
}

std::optional<std::string> WorkQueue::PopLocked() {
  if (queue_.empty()) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  return key;
}

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    PromoteReadyLocked();
    if (auto key = PopLocked()) return key;
    if (shutting_down_) return std::nullopt;
    if (waiting_.empty()) {
      cv_.wait(lock);
    } else {
      auto next = std::min_element(waiting_.begin(), waiting_.end(), [](auto& a, auto& b) {
                    return a.second < b.second;
                  })->second;
      auto wait = std::min<Clock::Duration>(next - clock_->Now(), kPollPeriod);
      cv_.wait_for(lock, std::max(wait, Clock::Duration(std::chrono::milliseconds(1))));
    }
  }
}

std::optional<std::string> WorkQueue::TryGet() {
  std::lock_guard<std::mutex> lock(mu_);
  PromoteReadyLocked();
  return PopLocked();
}

void WorkQueue::Done(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  processing_.erase(key);
  if (dirty_.count(key)) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  waiting_.clear();
  cv_.notify_all();
}

bool WorkQueue::ShuttingDown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutting_down_;
}

size_t WorkQueue::NumProcessing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return processing_.size();
}

size_t WorkQueue::Len() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

size_t WorkQueue::NumDelayed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_.size();
}

uint64_t WorkQueue::adds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return adds_;
}

uint64_t WorkQueue::retries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retries_;
}

}  // namespace tj::kube
