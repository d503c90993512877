#include "kube/leader_election.h"

#include <algorithm>
#include <condition_variable>
#include <thread>
#include <utility>

#include "kube/resource.h"

namespace tj::kube {

using nlohmann::json;

LeaderElector::LeaderElector(Client* client, Clock* clock, LeaderElectionConfig config,
                             LeaderCallbacks callbacks, EventLog* log,
                             std::function<WallTime()> wall_clock)
    : client_(client),
      clock_(clock),
      config_(std::move(config)),
      callbacks_(std::move(callbacks)),
      log_(log),
      wall_clock_(std::move(wall_clock)) {}

RestConfig LeaseClientConfig(RestConfig base, const LeaderElectionConfig& election) {
  base.qps = 0;
  base.max_retries = 0;
  const auto retry_s = std::chrono::ceil<std::chrono::seconds>(election.retry_period);
  base.timeout = std::max(std::chrono::seconds(1), retry_s);
  return base;
}

Status LeaderElector::Validate() const {
  const std::string what =
      "leader election lease " + config_.lease_namespace + "/" + config_.lease_name;
  if (config_.lease_name.empty() || config_.lease_namespace.empty()) {
    return Status::Error("leader election needs a lease namespace and name");
  }
  if (config_.identity.empty()) return Status::Error(what + ": the identity is empty");
  if (config_.lease_duration <= config_.renew_deadline) {
    return Status::Error(what + ": leaseDuration must be greater than renewDeadline");
  }
  if (config_.renew_deadline.count() <= 1.2 * config_.retry_period.count()) {
    return Status::Error(what + ": renewDeadline must be greater than 1.2 x retryPeriod");
  }
  if (config_.retry_period.count() <= 0) return Status::Error(what + ": retryPeriod must be > 0");
  return Status::Ok();
}

std::string LeaderElector::ObservedHolder() const {
  MutexLock lock(mu_);
  return observed_spec_.is_object() ? observed_spec_.value("holderIdentity", "") : "";
}

void LeaderElector::Warn(const std::string& m) {
  if (log_ != nullptr) {
    log_->Warn("leader election " + config_.lease_namespace + "/" + config_.lease_name + ": " + m);
  }
}

bool LeaderElector::TryAcquireOrRenew() {
  const auto& leases = resources::kLeases;
  const std::string now_s = FormatMicroTime(wall_clock_());
  const int duration_s = static_cast<int>(
      std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count());
  auto current = client_->Get(leases, config_.lease_namespace, config_.lease_name);
  if (!current.ok()) {
    if (!IsNotFound(current.error())) {
      Warn("reading the lease failed: " + current.error().ToString());
      return false;
    }
    json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec",
         {{"holderIdentity", config_.identity},
          {"leaseDurationSeconds", duration_s},
          {"acquireTime", now_s},
          {"renewTime", now_s},
          {"leaseTransitions", 0}}}};
    auto created = client_->Create(leases, config_.lease_namespace, lease);
    if (!created.ok()) return false;  // another candidate was faster
    MutexLock lock(mu_);
    observed_spec_ = (*created)["spec"];
    observed_at_ = clock_->Now();
    return true;
  }
  json lease = std::move(current).value();
  json spec = lease.contains("spec") ? lease["spec"] : json::object();
  const std::string holder = spec.value("holderIdentity", "");
  {
    MutexLock lock(mu_);
    // The lease changed since we last looked: its holder is alive; restart the expiry clock.
    if (spec != observed_spec_) {
      observed_spec_ = spec;
      observed_at_ = clock_->Now();
    }
    int held_s = spec.value("leaseDurationSeconds", duration_s);
    bool expired = clock_->Now() >= observed_at_ + std::chrono::seconds(held_s);
    if (!holder.empty() && holder != config_.identity && !expired) {
      if (holder != reported_leader_) {
        reported_leader_ = holder;
        if (callbacks_.on_new_leader) callbacks_.on_new_leader(holder);
      }
      return false;
    }
  }
  if (holder != config_.identity) {
    spec["acquireTime"] = now_s;
    spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + 1;
  }
  spec["holderIdentity"] = config_.identity;
  spec["leaseDurationSeconds"] = duration_s;
  spec["renewTime"] = now_s;
  lease["spec"] = spec;
  // metadata.resourceVersion stays: a concurrent change makes this a 409, not a double leader.
  auto updated = client_->Update(leases, config_.lease_namespace, lease);
  if (!updated.ok()) {
    if (!IsConflict(updated.error()))
      Warn("updating the lease failed: " + updated.error().ToString());
    return false;
  }
  MutexLock lock(mu_);
  observed_spec_ = (*updated)["spec"];
  observed_at_ = clock_->Now();
  if (reported_leader_ != config_.identity) {
    reported_leader_ = config_.identity;
    if (callbacks_.on_new_leader) callbacks_.on_new_leader(config_.identity);
  }
  return true;
}

void LeaderElector::Release() {
  auto current = client_->Get(resources::kLeases, config_.lease_namespace, config_.lease_name);
  if (!current.ok()) return;
  json lease = std::move(current).value();
  if (lease["spec"].value("holderIdentity", "") != config_.identity) return;
  const std::string now_s = FormatMicroTime(wall_clock_());
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = now_s;
  lease["spec"]["acquireTime"] = now_s;
  auto updated = client_->Update(resources::kLeases, config_.lease_namespace, lease);
  if (!updated.ok()) Warn("releasing the lease failed: " + updated.error().ToString());
}

void LeaderElector::Sleep(std::stop_token stop, std::chrono::milliseconds d) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock<std::mutex> lock(m);
  cv.wait_for(lock, std::move(stop), d, [] { return false; });
}

Clock::TimePoint LeaderElector::RenewDeadline() const {
  MutexLock lock(mu_);
  return renewed_at_ + config_.renew_deadline;
}

bool LeaderElector::StopLeading() {
  if (!leading_.exchange(false)) return false;
  if (callbacks_.on_stopped_leading) callbacks_.on_stopped_leading();
  return true;
}

void LeaderElector::WatchRenewDeadline(const std::stop_token& stop) {
  // A tenth of the retry period, at most 100 ms: the term ends that soon after the deadline.
  const auto tick = std::min(std::chrono::milliseconds(100), config_.retry_period / 10);
  while (!stop.stop_requested()) {
    if (clock_->Now() >= RenewDeadline()) {
      if (StopLeading()) {
        Warn("not renewed within the renew deadline (" +
             std::to_string(config_.renew_deadline.count()) + " ms): stopped leading");
      }
      return;
    }
    Sleep(stop, std::max(tick, std::chrono::milliseconds(1)));
  }
}

Status LeaderElector::Run(const std::stop_token& stop) {
  TJ_RETURN_IF_ERROR(Validate());
  // Campaign.
  Clock::TimePoint attempt_start = clock_->Now();
  while (!stop.stop_requested()) {
    attempt_start = clock_->Now();
    if (TryAcquireOrRenew()) break;
    Sleep(stop, config_.retry_period);
  }
  if (stop.stop_requested()) return Status::Ok();
  {
    MutexLock lock(mu_);
    renewed_at_ = attempt_start;
  }
  leading_ = true;
  if (callbacks_.on_started_leading) callbacks_.on_started_leading();
  std::jthread watchdog([this](const std::stop_token& s) { WatchRenewDeadline(s); });
  // Renew every retryPeriod; a failed attempt is retried every retryPeriod until the watchdog
  // ends the term.
  while (!stop.stop_requested() && leading_.load()) {
    Sleep(stop, config_.retry_period);
    if (stop.stop_requested() || !leading_.load()) break;
    attempt_start = clock_->Now();
    if (TryAcquireOrRenew()) {
      MutexLock lock(mu_);
      renewed_at_ = std::max(renewed_at_, attempt_start);
    }
  }
  watchdog.request_stop();
  watchdog.join();
  if (!leading_.load()) {
    return Status::Error("lost the lease " + config_.lease_namespace + "/" + config_.lease_name +
                         ": not renewed within the renew deadline");
  }
  if (config_.release_on_stop) Release();
  StopLeading();
  return Status::Ok();
}

}  // namespace tj::kube
