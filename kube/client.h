// kube::Client: the calls a controller makes to the API server, for any resource. The seam
// that controllers are unit-tested behind; RestClient (rest_client.h) is the real one.
// Objects are JSON (nlohmann::json) exactly as the API server reads and writes them.
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>

#include "kube/api_error.h"
#include "kube/resource.h"
#include "kube/watch_decoder.h"

namespace tj::kube {

using nlohmann::json;

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t page_size = 500;       // items per page; all pages are fetched
  std::string resource_version;  // "" (most recent) or "0" (any, from the watch cache)
  // Called on each item as soon as it is decoded, before the next one is: it may change the
  // item (an informer's transform) and returns false to drop it. A page then never holds more
  // than one item as the server sent it, however many large objects it lists. Null: the items
  // are returned as sent. A client that cannot call it early calls it on the decoded page.
  std::function<bool(json& item)> each_item;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // start after this version ("" = from now)
  bool allow_bookmarks = true;
  int timeout_seconds = 0;  // the server ends the watch after this long; 0: its default
};

enum class PatchType {
  kMerge,           // application/merge-patch+json (RFC 7386)
  kJson,            // application/json-patch+json (RFC 6902)
  kStrategicMerge,  // application/strategic-merge-patch+json (built-in types only)
  kApply,           // server-side apply: application/apply-patch+yaml (JSON is YAML)
};

struct PatchOptions {
  std::string field_manager;  // required for kApply
  bool force = false;         // kApply: take over conflicting fields
  std::string subresource;    // "" or "status"
};

struct DeleteOptions {
  std::string propagation_policy;  // "" (the resource's default), Foreground, Background, Orphan
  std::optional<std::string> precondition_uid;
  std::optional<std::string> precondition_resource_version;
  std::optional<int64_t> grace_period_seconds;
};

// How a watch ended without an error.
struct WatchSummary {
  int events = 0;
  std::string last_resource_version;  // of the last event (bookmarks included)
};

class Client {
 public:
  virtual ~Client() = default;

  virtual Result<json> Get(const Resource& r, const std::string& ns, const std::string& name) = 0;
  // All pages, merged: {"items": [...], "metadata": {"resourceVersion": <of the first page>}}.
  virtual Result<json> List(const Resource& r, const std::string& ns,
                            const ListOptions& options = {}) = 0;
  virtual Result<json> Create(const Resource& r, const std::string& ns, const json& object) = 0;
  // PUT of the whole object (name from its metadata); metadata.resourceVersion, when set,
  // makes it conditional (409 Conflict when the object changed).
  virtual Result<json> Update(const Resource& r, const std::string& ns, const json& object) = 0;
  // PUT to the status subresource.
  virtual Result<json> UpdateStatus(const Resource& r, const std::string& ns,
                                    const json& object) = 0;
  virtual Result<json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                             PatchType type, const json& patch,
                             const PatchOptions& options = {}) = 0;
  // Returns the server's answer: the object (with deletionTimestamp, when finalizers or
  // graceful deletion keep it) or a Status.
  virtual Result<json> Delete(const Resource& r, const std::string& ns, const std::string& name,
                              const DeleteOptions& options = {}) = 0;

  // Streams events to `on_event` until the server ends the watch (its timeout), `on_event`
  // returns false, or `stop` is requested; all three return the summary. ERROR events are
  // passed to on_event (a 410 there means: relist). A non-200 answer (410 Gone included) is
  // returned as an error. on_event may take (move) the event's object: it is not used after.
  // The objects come without metadata.managedFields (watch_decoder.h).
  virtual Result<WatchSummary> Watch(const Resource& r, const std::string& ns,
                                     const WatchOptions& options,
                                     const std::function<bool(WatchEvent&)>& on_event,
                                     std::stop_token stop = {}) = 0;

  // Any other call: method and path (with query), JSON body or none. Returns the JSON answer.
  virtual Result<json> Raw(const std::string& method, const std::string& path_and_query,
                           const std::optional<json>& body = std::nullopt) = 0;
};

}  // namespace tj::kube
