#include "kube/work_queue.h"

#include <algorithm>

namespace tj::kube {

namespace {
constexpr auto kPollPeriod = std::chrono::milliseconds(20);
}

WorkQueue::WorkQueue(Clock* clock, Clock::Duration base_delay, Clock::Duration max_delay)
    : clock_(clock),
      backoff_(base_delay, max_delay),
      queue_duration_(Histogram::WorkQueueBuckets()),
      work_duration_(Histogram::WorkQueueBuckets()) {}

double WorkQueue::SecondsSince(Clock::TimePoint t) const {
  return std::chrono::duration<double>(clock_->Now() - t).count();
}

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_) return;
  if (dirty_.count(key)) return;  // already queued (or to be re-queued at Done)
  idle_.erase(key);               // a plain add supersedes a wait for idleness
  ++adds_;
  dirty_.insert(key);
  queued_at_.emplace(key, clock_->Now());
  if (processing_.count(key)) return;  // Done() queues it
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::Add(const std::string& key) {
  MutexLock lock(mu_);
  AddLocked(key);
}

void WorkQueue::ScheduleLocked(std::map<std::string, Clock::TimePoint>* due, const std::string& key,
                               Clock::Duration delay) {
  if (shutting_down_) return;
  if (delay <= Clock::Duration::zero()) {
    AddLocked(key);
    return;
  }
  auto at = clock_->Now() + delay;
  auto it = due->find(key);
  if (it == due->end() || at < it->second) (*due)[key] = at;  // the earlier time wins
  cv_.notify_all();
}

void WorkQueue::AddAfter(const std::string& key, Clock::Duration delay) {
  MutexLock lock(mu_);
  ScheduleLocked(&waiting_, key, delay);
}

void WorkQueue::AddWhenIdle(const std::string& key, Clock::Duration max_delay) {
  MutexLock lock(mu_);
  if (dirty_.count(key)) return;  // queued already: that pass comes sooner
  ScheduleLocked(&idle_, key, max_delay);
}

void WorkQueue::AddRateLimited(const std::string& key) {
  auto delay = backoff_.When(key);
  {
    MutexLock lock(mu_);
    ++retries_;
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) { backoff_.Forget(key); }
int WorkQueue::NumRequeues(const std::string& key) const { return backoff_.NumRequeues(key); }

void WorkQueue::PromoteReadyLocked() {
  if (waiting_.empty() && idle_.empty()) return;
  const auto now = clock_->Now();
  for (auto* due : {&idle_, &waiting_}) {
    for (auto it = due->begin(); it != due->end();) {
      if (it->second <= now) {
        std::string key = it->first;
        it = due->erase(it);
        AddLocked(key);
      } else {
        ++it;
      }
    }
  }
}

std::optional<std::string> WorkQueue::PopLocked() {
  if (queue_.empty()) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  if (auto it = queued_at_.find(key); it != queued_at_.end()) {
    queue_duration_.Observe(SecondsSince(it->second));
    queued_at_.erase(it);
  }
  started_at_[key] = clock_->Now();
  return key;
}

std::optional<std::string> WorkQueue::PopIdleLocked() {
  if (idle_.empty() || !queue_.empty() || processing_.size() > processing_idle_.size()) {
    return std::nullopt;  // other work first
  }
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {
    if (processing_.count(it->first)) continue;  // one worker per key
    std::string key = it->first;
    idle_.erase(it);
    processing_.insert(key);
    processing_idle_.insert(key);
    started_at_[key] = clock_->Now();
    return key;
  }
  return std::nullopt;
}

std::optional<std::string> WorkQueue::Get() {
  MutexLock lock(mu_);
  for (;;) {
    PromoteReadyLocked();
    if (auto key = PopLocked()) return key;
    if (auto key = PopIdleLocked()) return key;
    if (shutting_down_) return std::nullopt;
    if (waiting_.empty() && idle_.empty()) {
      cv_.wait(lock);
    } else {
      auto next = Clock::TimePoint::max();
      for (const auto* due : {&waiting_, &idle_}) {
        for (const auto& [key, at] : *due) next = std::min(next, at);
      }
      auto wait = std::min<Clock::Duration>(next - clock_->Now(), kPollPeriod);
      cv_.wait_for(lock, std::max(wait, Clock::Duration(std::chrono::milliseconds(1))));
    }
  }
}

std::optional<std::string> WorkQueue::TryGet() {
  MutexLock lock(mu_);
  PromoteReadyLocked();
  if (auto key = PopLocked()) return key;
  return PopIdleLocked();
}

void WorkQueue::Done(const std::string& key) {
  MutexLock lock(mu_);
  processing_.erase(key);
  processing_idle_.erase(key);
  if (auto it = started_at_.find(key); it != started_at_.end()) {
    work_duration_.Observe(SecondsSince(it->second));
    started_at_.erase(it);
  }
  if (dirty_.count(key)) {
    queue_.push_back(key);
    cv_.notify_one();
  } else if (!idle_.empty()) {
    cv_.notify_all();  // the last busy key may be done: idle keys may go now
  }
}

void WorkQueue::ShutDown() {
  MutexLock lock(mu_);
  shutting_down_ = true;
  waiting_.clear();
  idle_.clear();
  cv_.notify_all();
}

bool WorkQueue::ShuttingDown() const {
  MutexLock lock(mu_);
  return shutting_down_;
}

size_t WorkQueue::NumProcessing() const {
  MutexLock lock(mu_);
  return processing_.size();
}

size_t WorkQueue::NumIdle() const {
  MutexLock lock(mu_);
  return idle_.size();
}

bool WorkQueue::BusyBesides(const std::string& key) const {
  MutexLock lock(mu_);
  if (!queue_.empty()) return true;
  size_t others = processing_.size() - processing_idle_.size();
  if (processing_.count(key) && !processing_idle_.count(key)) --others;
  return others > 0;
}

size_t WorkQueue::Len() const {
  MutexLock lock(mu_);
  return queue_.size();
}

size_t WorkQueue::NumDelayed() const {
  MutexLock lock(mu_);
  return waiting_.size();
}

uint64_t WorkQueue::adds() const {
  MutexLock lock(mu_);
  return adds_;
}

uint64_t WorkQueue::retries() const {
  MutexLock lock(mu_);
  return retries_;
}

}  // namespace tj::kube
