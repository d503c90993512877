#include "operator/controller/trainer_status_poller.h"

#include <thread>
#include <utility>

#include "operator/controller/reconciler.h"

namespace tj::controller {

namespace {
constexpr std::chrono::minutes kForgetAfter{10};
}  // namespace

TrainerStatusPoller::TrainerStatusPoller(Fetch fetch, Requeue requeue, int max_in_flight,
                                         std::chrono::milliseconds period, Clock* clock)
    : fetch_(std::move(fetch)),
      requeue_(std::move(requeue)),
      max_in_flight_(max_in_flight),
      period_(period),
      clock_(clock != nullptr ? clock : RealClock::Get()) {}

TrainerStatusPoller::~TrainerStatusPoller() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return in_flight_ == 0; });
}

int TrainerStatusPoller::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

uint64_t TrainerStatusPoller::polls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return polls_;
}

std::optional<nlohmann::json> TrainerStatusPoller::Latest(const std::string& key,
                                                          const PodView& pod) {
  const Clock::TimePoint now = clock_->Now();
  const std::string id = key + "/" + pod.name + "@" + pod.pod_ip + ":" +
                         (pod.status_port ? std::to_string(*pod.status_port) : "");
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = !it->second.polling && now - it->second.asked > kForgetAfter ? entries_.erase(it)
                                                                      : std::next(it);
  }
  Entry& e = entries_[id];
  e.asked = now;
  const bool due = !e.ended || now - *e.ended >= period_;
  if (!e.polling && due && in_flight_ < max_in_flight_) {
    e.polling = true;
    ++in_flight_;
    ++polls_;
    // Detached: the destructor waits for in_flight_ to reach 0, and the thread touches this
    // object last under mu_ before it decrements it.
    std::thread(&TrainerStatusPoller::Poll, this, key, id, pod).detach();
  }
  return e.answer;
}

void TrainerStatusPoller::Poll(const std::string& key, const std::string& entry,
                               const PodView& pod) {
  std::optional<nlohmann::json> answer;
  try {
    answer = fetch_(pod);
    if (answer) answer = CopiedTrainerStatus(*answer);  // the rest is dropped here
  } catch (...) {  // a fetch that throws is a pod that did not answer
    answer.reset();
  }
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(entry);
    if (it != entries_.end()) {
      it->second.polling = false;
      it->second.ended = clock_->Now();
      if (answer && answer != it->second.answer) {
        it->second.answer = std::move(answer);
        changed = true;
      }
    }
  }
  if (changed && requeue_) requeue_(key);
  std::lock_guard<std::mutex> lock(mu_);
  if (--in_flight_ == 0) idle_.notify_all();
}

}  // namespace tj::controller
