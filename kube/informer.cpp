#include "kube/informer.h"

#include <random>
#include <utility>

#include "common/backoff.h"

namespace tj::kube {

void StripManagedFields(nlohmann::json& object) {
  if (object.is_object() && object.contains("metadata") && object["metadata"].is_object()) {
    object["metadata"].erase("managedFields");
  }
}

Informer::Informer(Client* client, Clock* clock, InformerOptions options, EventLog* log)
    : client_(client), clock_(clock), options_(std::move(options)), log_(log) {
  if (!options_.initial_resource_version.empty()) {
    resource_version_ = options_.initial_resource_version;
    need_list_ = false;
  }
}

Informer::~Informer() { Stop(); }

void Informer::AddHandlers(ResourceEventHandlers handlers) {
  handlers_.push_back(std::move(handlers));
}

void Informer::Start() {
  if (run_thread_.joinable()) return;
  run_thread_ = std::jthread([this](const std::stop_token& stop) { Run(stop); });
  if (options_.resync_period.count() > 0) {
    resync_thread_ = std::jthread([this](const std::stop_token& stop) { ResyncLoop(stop); });
  }
}

void Informer::Stop() {
  for (auto* t : {&run_thread_, &resync_thread_}) {
    if (t->joinable()) {
      t->request_stop();
      t->join();
    }
  }
}

bool Informer::WaitForSync(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return synced_.load(); });
  return synced_.load();
}

std::string Informer::last_resource_version() const {
  MutexLock lock(mu_);
  return resource_version_;
}

void Informer::Warn(const std::string& message) {
  if (log_ != nullptr)
    log_->Warn("informer " + options_.resource.Path(options_.ns) + ": " + message);
}

void Informer::Sleep(std::stop_token stop, Clock::Duration d) {
  MutexLock lock(mu_);
  cv_.wait_for(lock, std::move(stop), d, [] { return false; });
}

bool Informer::ListAll() {
  ListOptions lo;
  lo.label_selector = options_.label_selector;
  lo.field_selector = options_.field_selector;
  // The first list may come from the API server's watch cache (resourceVersion=0, as
  // client-go's reflector lists): no read of etcd while a starting operator waits for it. A
  // relist (410 Gone after a compaction, or a failed watch) asks for the most recent state.
  if (lists_ == 0) lo.resource_version = "0";
  // Each item is kept or dropped, and transformed, as soon as it is decoded: a list of many
  // large objects never stands whole in memory as the server sent it.
  if (options_.keep || options_.transform) {
    lo.each_item = [this](nlohmann::json& item) {
      if (options_.keep && !options_.keep(item)) return false;
      if (options_.transform) options_.transform(item);
      return true;
    };
  }
  auto list = client_->List(options_.resource, options_.ns, lo);
  if (!list.ok()) {
    Warn("list failed: " + list.error().ToString());
    return false;
  }
  std::vector<nlohmann::json> items;
  items.reserve((*list)["items"].size());
  for (auto& item : (*list)["items"]) {
    // Again, for a client that did not call each_item (transforms are idempotent).
    if (lo.each_item && !lo.each_item(item)) continue;
    items.push_back(std::move(item));
  }
  list->erase("items");  // the cache holds the only copy from here on
  auto delta = cache_.Replace(std::move(items));
  {
    MutexLock lock(mu_);
    resource_version_ = (*list)["metadata"].value("resourceVersion", "");
  }
  ++lists_;
  for (const auto& h : handlers_) {
    for (const auto& o : delta.added) {
      if (h.on_add) h.on_add(*o);
    }
    for (const auto& [old_obj, new_obj] : delta.updated) {
      if (h.on_update) h.on_update(*old_obj, *new_obj);
    }
    for (const auto& o : delta.deleted) {
      if (h.on_delete) h.on_delete(*o);
    }
  }
  if (!synced_.exchange(true)) {
    MutexLock lock(mu_);
    cv_.notify_all();
  }
  return true;
}

bool Informer::HandleEvent(WatchEvent& ev) {
  using T = WatchEvent::Type;
  if (ev.type == T::kError) {
    ApiError e = ev.AsError();
    if (IsGone(e)) {
      Warn("watch from version " + last_resource_version() + ": 410 Gone; listing again");
      need_list_ = true;  // our version is too old: start over from a list
    } else {
      Warn("watch error event: " + e.ToString());
    }
    return false;
  }
  std::string rv = ev.ResourceVersion();
  if (ev.type != T::kAdded && ev.type != T::kModified && ev.type != T::kDeleted) {
    // Bookmarks only move the version on.
  } else {
    nlohmann::json object = std::move(ev.object);  // the event is ours to take
    if (options_.keep && !options_.keep(object)) {
      // Not one of ours (any longer): out of the cache; handled as deleted if it was in.
      const ObjectCache::Ptr old = cache_.Remove(ObjectKey(object));
      for (const auto& h : handlers_) {
        if (old && h.on_delete) h.on_delete(*old);
      }
    } else if (ev.type == T::kDeleted) {
      if (options_.transform) options_.transform(object);
      cache_.Remove(ObjectKey(object));
      for (const auto& h : handlers_) {
        if (h.on_delete) h.on_delete(object);
      }
    } else {
      if (options_.transform) options_.transform(object);
      ObjectCache::Ptr stored;
      const ObjectCache::Ptr old = cache_.Upsert(std::move(object), &stored);
      for (const auto& h : handlers_) {
        if (old && h.on_update) {
          h.on_update(*old, *stored);
        } else if (!old && h.on_add) {
          h.on_add(*stored);
        }
      }
    }
  }
  if (!rv.empty()) {
    MutexLock lock(mu_);
    resource_version_ = rv;
  }
  return true;
}

void Informer::Run(const std::stop_token& stop) {
  ExponentialBackoff backoff(options_.min_backoff, options_.max_backoff, 2.0, 0.2,
                             std::hash<std::string>{}(options_.resource.Path(options_.ns)));
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(options_.resource.plural)));
  std::uniform_int_distribution<int> timeout_dist(
      options_.min_watch_timeout_s,
      std::max(options_.min_watch_timeout_s, options_.max_watch_timeout_s));
  while (!stop.stop_requested()) {
    if (need_list_) {
      if (!ListAll()) {
        Sleep(stop, backoff.Next());
        continue;
      }
      need_list_ = false;
    } else if (!synced_.exchange(true)) {
      MutexLock lock(mu_);
      cv_.notify_all();  // started from a given version: nothing to wait for
    }
    WatchOptions wo;
    wo.label_selector = options_.label_selector;
    wo.field_selector = options_.field_selector;
    wo.resource_version = last_resource_version();
    wo.allow_bookmarks = true;
    wo.timeout_seconds = timeout_dist(rng);
    ++watches_;
    auto start = clock_->Now();
    auto res = client_->Watch(
        options_.resource, options_.ns, wo, [this](WatchEvent& ev) { return HandleEvent(ev); },
        stop);
    if (stop.stop_requested()) break;
    if (!res.ok()) {
      if (IsGone(res.error())) {
        Warn("watch from version " + wo.resource_version + ": 410 Gone; listing again");
        need_list_ = true;
        continue;
      }
      Warn("watch failed, reconnecting: " + res.error().ToString());
      Sleep(stop, backoff.Next());
      continue;
    }
    if (need_list_) continue;  // a 410 ERROR event
    // A watch that ends normally is fine; one that ends at once, over and over, is not.
    if (clock_->Now() - start > std::chrono::seconds(1) || res->events > 0) {
      backoff.Reset();
    } else {
      Sleep(stop, backoff.Next());
    }
  }
}

void Informer::ResyncLoop(const std::stop_token& stop) {
  while (!stop.stop_requested()) {
    Sleep(stop, options_.resync_period);
    if (stop.stop_requested() || !synced_.load()) continue;
    for (const auto& o : cache_.ListShared()) {
      for (const auto& h : handlers_) {
        if (h.on_update) h.on_update(*o, *o);
      }
    }
  }
}

}  // namespace tj::kube
