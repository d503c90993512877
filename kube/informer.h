// Informer: keeps an ObjectCache equal to the API server's objects of one resource, the way
// client-go's reflector does: list (paginated), then watch from the list's resourceVersion
// with bookmarks and a server timeout of 5-10 minutes; on a watch error it reconnects with
// backoff (800 ms .. 30 s) from the last version seen; on 410 Gone (an HTTP status or an
// ERROR event) it lists again. Handlers see every change; a resync period re-delivers every
// cached object as an update. Handlers run on the informer's threads and must be thread-safe
// (they usually only add keys to a WorkQueue).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/event_log.h"
#include "common/thread_annotations.h"
#include "kube/client.h"
#include "kube/object_cache.h"

namespace tj::kube {

struct InformerOptions {
  Resource resource;
  std::string ns;  // "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  std::chrono::milliseconds resync_period{0};  // 0: no resync
  int min_watch_timeout_s = 300;               // each watch asks the server for a random
  int max_watch_timeout_s = 600;               // timeout in [min, max]
  std::chrono::milliseconds min_backoff{800};
  std::chrono::milliseconds max_backoff{30000};
  std::string initial_resource_version;  // start watching here without listing first (tests
                                         // and resumption); "" lists first
  // Applied to every listed or watched object before it is cached and handed to the handlers
  // (client-go's SetTransform): drop what the controller never reads (managedFields, a
  // Secret's data) so the cache holds less. Null: objects are kept as the server sent them.
  // A list applies it to each item as the item is decoded (ListOptions::each_item), and may
  // apply it again: it must be idempotent, and `keep` must hold of what it leaves.
  std::function<void(nlohmann::json& object)> transform;
  // Asked of every listed or watched object before the transform: false keeps it out of the
  // cache and from the handlers (an object that stops passing is handled as deleted). For
  // objects the label selector lets through that the controller does not own. Null: all pass.
  std::function<bool(const nlohmann::json& object)> keep;
};

// A transform that removes metadata.managedFields (server-side apply bookkeeping, often the
// largest part of an object, never read by a controller).
void StripManagedFields(nlohmann::json& object);

struct ResourceEventHandlers {
  std::function<void(const nlohmann::json&)> on_add;
  std::function<void(const nlohmann::json& old_obj, const nlohmann::json& new_obj)> on_update;
  std::function<void(const nlohmann::json& last)> on_delete;
};

class Informer {
 public:
  // `client`, `clock` and `log` (may be null) must outlive the informer.
  Informer(Client* client, Clock* clock, InformerOptions options, EventLog* log = nullptr);
  ~Informer();  // stops
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void AddHandlers(ResourceEventHandlers handlers);  // before Start()
  void Start();
  void Stop();  // idempotent; joins the threads

  bool HasSynced() const { return synced_.load(); }  // the first list is in the cache
  // Waits (real time) until HasSynced() or the timeout; returns HasSynced().
  bool WaitForSync(std::chrono::milliseconds timeout);

  const ObjectCache& cache() const { return cache_; }
  ObjectCache& cache() { return cache_; }

  // Counters, for tests and metrics.
  int lists() const { return lists_.load(); }      // successful lists (1 + relists)
  int watches() const { return watches_.load(); }  // watch connections opened
  std::string last_resource_version() const;

 private:
  void Run(const std::stop_token& stop);
  void ResyncLoop(const std::stop_token& stop);
  bool ListAll();
  // Handles one event; false ends the watch (ERROR).
  bool HandleEvent(WatchEvent& ev);  // takes ev.object
  void Sleep(std::stop_token stop, Clock::Duration d);
  void Warn(const std::string& message);

  Client* client_;
  Clock* clock_;
  InformerOptions options_;
  EventLog* log_;
  ObjectCache cache_;
  std::vector<ResourceEventHandlers> handlers_;

  std::atomic<bool> synced_{false};
  std::atomic<int> lists_{0};
  std::atomic<int> watches_{0};
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::string resource_version_ TJ_GUARDED_BY(mu_);
  bool need_list_ = true;  // only touched by the Run thread
  std::jthread run_thread_;
  std::jthread resync_thread_;
};

}  // namespace tj::kube
