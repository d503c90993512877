#include "tests/support/fake_client.h"

#include <utility>

namespace tj::testing {

kube::ApiError ApiErrorOf(int code, std::string reason, std::string message) {
  kube::ApiError e;
  e.code = code;
  e.reason = std::move(reason);
  e.message = std::move(message);
  return e;
}

namespace {

using json = nlohmann::json;

bool Matches(const FakeClient::Call& c, FakeClient::Verb verb, std::string_view plural) {
  return c.verb == verb && (plural.empty() || c.resource.plural == plural);
}

FakeClient::Call CallOf(FakeClient::Verb verb, const kube::Resource& r, const std::string& ns,
                        std::string name, json body = nullptr) {
  FakeClient::Call c;
  c.verb = verb;
  c.resource = r;
  c.ns = ns;
  c.name = std::move(name);
  c.body = std::move(body);
  return c;
}

// metadata[key] of `object`, "" when it has none.
std::string MetadataText(const json& object, const char* key) {
  const auto m = object.find("metadata");
  return m != object.end() && m->is_object() ? m->value(key, "") : "";
}

std::string NameOf(const json& object) { return MetadataText(object, "name"); }

}  // namespace

FakeClient::Refusal FakeClient::Refusing(Verb verb, kube::ApiError error, std::string plural) {
  return [verb, error = std::move(error),
          plural = std::move(plural)](const Call& c) -> std::optional<kube::ApiError> {
    if (!Matches(c, verb, plural)) return std::nullopt;
    return error;
  };
}

void FakeClient::AnswerRaw(const std::string& request, json answer) {
  MutexLock lock(mu_);
  raw_.insert_or_assign(request, kube::Result<json>(std::move(answer)));
}

void FakeClient::AnswerRaw(const std::string& request, kube::ApiError error) {
  MutexLock lock(mu_);
  raw_.insert_or_assign(request, kube::Result<json>(std::move(error)));
}

std::vector<FakeClient::Call> FakeClient::Calls() const {
  MutexLock lock(mu_);
  return calls_;
}

std::vector<FakeClient::Call> FakeClient::Calls(Verb verb, std::string_view plural) const {
  MutexLock lock(mu_);
  std::vector<Call> out;
  for (const Call& c : calls_) {
    if (Matches(c, verb, plural)) out.push_back(c);
  }
  return out;
}

int FakeClient::Count(Verb verb, std::string_view plural) const {
  return static_cast<int>(Calls(verb, plural).size());
}

std::vector<std::string> FakeClient::Keys(Verb verb, std::string_view plural) const {
  std::vector<std::string> out;
  for (const Call& c : Calls(verb, plural)) {
    if (c.ok) out.push_back(c.Key());
  }
  return out;
}

std::vector<json> FakeClient::Bodies(Verb verb, std::string_view plural) const {
  std::vector<json> out;
  for (Call& c : Calls(verb, plural)) {
    if (c.ok) out.push_back(std::move(c.body));
  }
  return out;
}

void FakeClient::ClearCalls() {
  MutexLock lock(mu_);
  calls_.clear();
}

void FakeClient::Stall(bool on) {
  {
    MutexLock lock(mu_);
    stalled_ = on;
  }
  unstalled_.notify_all();
}

int FakeClient::calls_while_stalled() const {
  MutexLock lock(mu_);
  return calls_while_stalled_;
}

template <typename T>
kube::Result<T> FakeClient::Serve(Call call, const std::function<kube::Result<T>()>& answer) {
  MutexLock lock(mu_);
  const size_t index = calls_.size();
  calls_.push_back(std::move(call));
  if (stalled_) ++calls_while_stalled_;
  unstalled_.wait(lock, [this] {
    mu_.AssertHeld();
    return !stalled_;
  });
  if (refuse) {
    if (std::optional<kube::ApiError> error = refuse(calls_[index])) return *error;
  }
  kube::Result<T> result = answer();
  calls_[index].ok = result.ok();
  return result;
}

kube::Result<json> FakeClient::Get(const kube::Resource& r, const std::string& ns,
                                   const std::string& name) {
  const Call call = CallOf(Verb::kGet, r, ns, name);
  return Serve<json>(call, [&]() -> kube::Result<json> {
    const auto it = existing.find(call.Key());
    if (it == existing.end()) return ApiErrorOf(404, "NotFound", name + " not found");
    return it->second;
  });
}

kube::Result<json> FakeClient::List(const kube::Resource& r, const std::string& ns,
                                    const kube::ListOptions& options) {
  Call call = CallOf(Verb::kList, r, ns, "");
  call.label_selector = options.label_selector;
  return Serve<json>(std::move(call), [&]() -> kube::Result<json> {
    json items = json::array();
    const auto it = lists.find(r.plural);
    if (it == lists.end()) return json{{"items", items}};
    for (json item : it->second) {
      if (!options.each_item || options.each_item(item)) items.push_back(std::move(item));
    }
    return json{{"items", items}};
  });
}

kube::Result<json> FakeClient::Create(const kube::Resource& r, const std::string& ns,
                                      const json& object) {
  const Call call = CallOf(Verb::kCreate, r, ns, NameOf(object), object);
  return Serve<json>(call, [&]() -> kube::Result<json> {
    const std::string key = call.Key();
    if (existing.contains(key)) return ApiErrorOf(409, "AlreadyExists", key + " exists");
    if (keep_writes) existing[key] = object;
    return object;
  });
}

kube::Result<json> FakeClient::Update(const kube::Resource& r, const std::string& ns,
                                      const json& object) {
  const Call call = CallOf(Verb::kUpdate, r, ns, NameOf(object), object);
  return Serve<json>(call, [&]() -> kube::Result<json> {
    if (keep_writes) existing[call.Key()] = object;
    return object;
  });
}

kube::Result<json> FakeClient::UpdateStatus(const kube::Resource& r, const std::string& ns,
                                            const json& object) {
  return Serve<json>(CallOf(Verb::kUpdateStatus, r, ns, NameOf(object), object),
                     [&]() -> kube::Result<json> { return object; });
}

kube::Result<json> FakeClient::Patch(const kube::Resource& r, const std::string& ns,
                                     const std::string& name, kube::PatchType, const json& patch,
                                     const kube::PatchOptions&) {
  return Serve<json>(CallOf(Verb::kPatch, r, ns, name, patch),
                     [&]() -> kube::Result<json> { return patch; });
}

kube::Result<json> FakeClient::Delete(const kube::Resource& r, const std::string& ns,
                                      const std::string& name, const kube::DeleteOptions& options) {
  Call call = CallOf(Verb::kDelete, r, ns, name);
  // The options as the DeleteOptions body carries them, those that are set.
  if (!options.propagation_policy.empty()) {
    call.body["propagationPolicy"] = options.propagation_policy;
  }
  if (options.precondition_uid) call.body["preconditions"]["uid"] = *options.precondition_uid;
  if (options.grace_period_seconds) call.body["gracePeriodSeconds"] = *options.grace_period_seconds;
  return Serve<json>(call, [&]() -> kube::Result<json> {
    const auto it = existing.find(call.Key());
    if (it != existing.end() && options.precondition_uid) {
      const std::string uid = MetadataText(it->second, "uid");
      if (uid != *options.precondition_uid) {
        return ApiErrorOf(409, "Conflict",
                          "Precondition failed: UID in precondition: " + *options.precondition_uid +
                              ", UID in object meta: " + uid);
      }
    }
    if (it != existing.end()) existing.erase(it);
    return json::object();
  });
}

kube::Result<kube::WatchSummary> FakeClient::Watch(const kube::Resource& r, const std::string& ns,
                                                   const kube::WatchOptions& options,
                                                   const std::function<bool(kube::WatchEvent&)>&,
                                                   std::stop_token) {
  Call call = CallOf(Verb::kWatch, r, ns, "");
  call.label_selector = options.label_selector;
  return Serve<kube::WatchSummary>(
      std::move(call), []() -> kube::Result<kube::WatchSummary> { return kube::WatchSummary{}; });
}

kube::Result<json> FakeClient::Raw(const std::string& method, const std::string& path_and_query,
                                   const std::optional<json>& body) {
  Call call;
  call.verb = Verb::kRaw;
  call.request = method + " " + path_and_query;
  if (body) call.body = *body;
  const std::string request = call.request;
  return Serve<json>(std::move(call), [&]() -> kube::Result<json> {
    mu_.AssertHeld();
    const auto it = raw_.find(request);
    if (it == raw_.end()) {
      return ApiErrorOf(404, "NotFound", "the server could not find the requested resource");
    }
    return it->second;
  });
}

}  // namespace tj::testing
