// FakeClient: the API server as unit tests fake it behind kube::Client. It holds objects by
// "<plural>/<name>" and answers Get, Create and Delete from them, answers what a test scripts
// (lists, raw requests, refusals), records every call in order, and can hold every call as a
// paused API server does. Thread-safe, as kube::Client requires.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "common/thread_annotations.h"
#include "kube/client.h"

namespace tj::testing {

// An API server's error answer.
kube::ApiError ApiErrorOf(int code, std::string reason, std::string message);

class FakeClient : public kube::Client {
 public:
  using json = nlohmann::json;

  enum class Verb { kGet, kList, kCreate, kUpdate, kUpdateStatus, kPatch, kDelete, kWatch, kRaw };

  // One call as the client was sent it.
  struct Call {
    Verb verb = Verb::kGet;
    kube::Resource resource;  // none for Raw
    std::string ns;
    std::string name;  // Create, Update, UpdateStatus: the object's metadata.name
    json body;         // the object, the patch, Raw's body or Delete's options set; null where none
    std::string label_selector;  // List, Watch
    std::string request;         // Raw: "GET /apis/...?limit=1"
    bool ok = false;             // whether it was answered with success

    // "<plural>/<name>": the key of `existing`.
    std::string Key() const { return resource.plural + "/" + name; }
  };
  // Looks at a call before it is answered: an error it returns is the answer.
  using Refusal = std::function<std::optional<kube::ApiError>(const Call&)>;

  // What the server holds and how it answers. A test sets and reads these while no call is in
  // flight; calls read and change them under the client's lock.
  //
  // The objects on the server by "<plural>/<name>", whatever their namespace. Get answers from
  // here (404 NotFound when absent), a Create of one of them is 409 AlreadyExists, and Delete
  // removes it (and succeeds when there was none; 409 Conflict when a UID precondition names
  // another uid than the object's).
  std::map<std::string, json> existing;
  // Whether a Create or an Update keeps the object in `existing`. A status write or a patch
  // never changes it, and no write sets a resourceVersion.
  bool keep_writes = false;
  // The items (an array) that a List of "<plural>" answers; no items for another plural.
  // Selectors are recorded, not applied; ListOptions::each_item is.
  std::map<std::string, json> lists;
  // When set, asked about each call first (after a stall).
  Refusal refuse;

  // A Refusal of every call of `verb` (on `plural`, when not empty) with `error`.
  static Refusal Refusing(Verb verb, kube::ApiError error, std::string plural = "");

  // What Raw answers to `request` ("GET /version"): `answer`, or `error`. A request with no
  // answer set is 404 NotFound.
  void AnswerRaw(const std::string& request, json answer);
  void AnswerRaw(const std::string& request, kube::ApiError error);

  // The calls so far, in the order they came; of one verb (on one plural, when not empty).
  std::vector<Call> Calls() const;
  std::vector<Call> Calls(Verb verb, std::string_view plural = {}) const;
  // How many calls of `verb` (on `plural`) came, whatever their answer.
  int Count(Verb verb, std::string_view plural = {}) const;
  // The keys ("<plural>/<name>") and the bodies of the calls of `verb` (on `plural`) that were
  // answered with success, in order.
  std::vector<std::string> Keys(Verb verb, std::string_view plural = {}) const;
  std::vector<json> Bodies(Verb verb, std::string_view plural = {}) const;
  // Forgets the calls so far.
  void ClearCalls();

  // While stalled, every call waits (as one to a paused API server does) until Stall(false).
  void Stall(bool on);
  // The calls that came while stalled.
  int calls_while_stalled() const;

  kube::Result<json> Get(const kube::Resource& r, const std::string& ns,
                         const std::string& name) override;
  kube::Result<json> List(const kube::Resource& r, const std::string& ns,
                          const kube::ListOptions& options) override;
  kube::Result<json> Create(const kube::Resource& r, const std::string& ns,
                            const json& object) override;
  kube::Result<json> Update(const kube::Resource& r, const std::string& ns,
                            const json& object) override;
  kube::Result<json> UpdateStatus(const kube::Resource& r, const std::string& ns,
                                  const json& object) override;
  kube::Result<json> Patch(const kube::Resource& r, const std::string& ns, const std::string& name,
                           kube::PatchType type, const json& patch,
                           const kube::PatchOptions& options) override;
  kube::Result<json> Delete(const kube::Resource& r, const std::string& ns, const std::string& name,
                            const kube::DeleteOptions& options) override;
  // Answers at once with no event.
  kube::Result<kube::WatchSummary> Watch(const kube::Resource& r, const std::string& ns,
                                         const kube::WatchOptions& options,
                                         const std::function<bool(kube::WatchEvent&)>& on_event,
                                         std::stop_token stop) override;
  kube::Result<json> Raw(const std::string& method, const std::string& path_and_query,
                         const std::optional<json>& body) override;

 private:
  // Records `call`, waits while stalled, asks `refuse`, then answers with `answer` (under the
  // lock) and records whether that succeeded.
  template <typename T>
  kube::Result<T> Serve(Call call, const std::function<kube::Result<T>()>& answer);

  mutable Mutex mu_;
  std::condition_variable_any unstalled_;
  std::vector<Call> calls_ TJ_GUARDED_BY(mu_);
  std::map<std::string, kube::Result<json>> raw_ TJ_GUARDED_BY(mu_);
  bool stalled_ TJ_GUARDED_BY(mu_) = false;
  int calls_while_stalled_ TJ_GUARDED_BY(mu_) = 0;
};

}  // namespace tj::testing
