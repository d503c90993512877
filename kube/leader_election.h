// Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: a candidate takes
// the lease when it is free or its holder has not renewed it for leaseDuration (15 s), renews
// it every retryPeriod (2 s), and stops leading when it could not renew for renewDeadline
// (10 s). Expiry is judged on the local clock from when this candidate last saw the lease
// change, so clock skew between machines does not matter. On shutdown the leader releases
// the lease (empty holder), so a successor need not wait for it to expire.
//
// A leader stops leading once renewDeadline has passed since its last successful renewal
// began, whatever call is in flight: a watchdog thread judges the deadline on the clock, not
// the renewing thread, which may wait on a stalled API server. The lease should be renewed
// through a client of its own (LeaseClientConfig): no client-side rate limit to queue behind
// the reconcilers, no retries, a short timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>

#include "common/clock.h"
#include "common/event_log.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/time_format.h"

namespace tj::kube {

struct LeaderElectionConfig {
  std::string lease_namespace;
  std::string lease_name;
  std::string identity;  // unique per candidate: hostname + "_" + a random suffix
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  bool release_on_stop = true;
};

// `base` for the lease's own client: no QPS limit, no retries, a timeout of one retryPeriod
// (at least the 1 s the transport can express), so one renewal attempt cannot outlast the
// renew deadline by much.
RestConfig LeaseClientConfig(RestConfig base, const LeaderElectionConfig& election);

struct LeaderCallbacks {
  std::function<void()> on_started_leading;  // called on Run()'s thread; must return quickly
  // Called once: on Run()'s thread when `stop` ends the term, on the watchdog's thread when
  // the renew deadline passed (then Run() may still wait for the call in flight to return).
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& identity)> on_new_leader;  // a holder seen changes
};

class LeaderElector {
 public:
  // `client`, `clock` and `log` (may be null) must outlive the elector.
  LeaderElector(
      Client* client, Clock* clock, LeaderElectionConfig config, LeaderCallbacks callbacks,
      EventLog* log = nullptr,
      std::function<WallTime()> wall_clock = [] { return std::chrono::system_clock::now(); });

  // Checks the configuration (durations, names) the way client-go does.
  Status Validate() const;

  // Campaigns until it leads, then renews until it loses the lease (returns an error naming
  // the lease) or `stop` is requested (releases the lease and returns OK).
  Status Run(const std::stop_token& stop);

  // One attempt to take or renew the lease; true when this candidate holds it afterwards.
  bool TryAcquireOrRenew();
  // Gives the lease up if this candidate holds it.
  void Release();

  bool IsLeader() const { return leading_.load(); }
  std::string ObservedHolder() const;

 private:
  void Sleep(std::stop_token stop, std::chrono::milliseconds d);
  // The time by which the next renewal must have succeeded: the start of the last
  // successful one plus renewDeadline.
  Clock::TimePoint RenewDeadline() const;
  // Ends the term (leading_ false, on_stopped_leading) once; false when it had ended already.
  bool StopLeading();
  // Watchdog: ends the term when the renew deadline passes, until `stop`.
  void WatchRenewDeadline(const std::stop_token& stop);
  void Warn(const std::string& m);

  Client* client_;
  Clock* clock_;
  LeaderElectionConfig config_;
  LeaderCallbacks callbacks_;
  EventLog* log_;
  std::function<WallTime()> wall_clock_;

  std::atomic<bool> leading_{false};
  mutable Mutex mu_;
  nlohmann::json observed_spec_ TJ_GUARDED_BY(mu_);
  Clock::TimePoint observed_at_ TJ_GUARDED_BY(mu_) = {};
  std::string observed_resource_version_ TJ_GUARDED_BY(mu_);
  std::string reported_leader_ TJ_GUARDED_BY(mu_);
  Clock::TimePoint renewed_at_ TJ_GUARDED_BY(mu_) = {};  // last successful attempt's start
};

}  // namespace tj::kube
