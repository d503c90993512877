// A kube::Client that answers every call as a server that accepts it and holds nothing: Get is
// NotFound, List is empty, writes answer with what they were sent. The fakes of unit tests of
// the operator's pure parts derive from it and override only the calls they record or script.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>

#include "kube/client.h"

namespace tj::testing {

// An API server's error answer.
inline kube::ApiError ApiErrorOf(int code, std::string reason, std::string message) {
  kube::ApiError e;
  e.code = code;
  e.reason = std::move(reason);
  e.message = std::move(message);
  return e;
}

class AcceptingClient : public kube::Client {
 public:
  using json = nlohmann::json;

  kube::Result<json> Get(const kube::Resource&, const std::string&,
                         const std::string& name) override {
    return ApiErrorOf(404, "NotFound", name + " not found");
  }
  kube::Result<json> List(const kube::Resource&, const std::string&,
                          const kube::ListOptions&) override {
    return json{{"items", json::array()}};
  }
  kube::Result<json> Create(const kube::Resource&, const std::string&,
                            const json& object) override {
    return object;
  }
  kube::Result<json> Update(const kube::Resource&, const std::string&, const json& o) override {
    return o;
  }
  kube::Result<json> UpdateStatus(const kube::Resource&, const std::string&,
                                  const json& o) override {
    return o;
  }
  kube::Result<json> Patch(const kube::Resource&, const std::string&, const std::string&,
                           kube::PatchType, const json& patch, const kube::PatchOptions&) override {
    return patch;
  }
  kube::Result<json> Delete(const kube::Resource&, const std::string&, const std::string&,
                            const kube::DeleteOptions&) override {
    return json::object();
  }
  kube::Result<kube::WatchSummary> Watch(const kube::Resource&, const std::string&,
                                         const kube::WatchOptions&,
                                         const std::function<bool(kube::WatchEvent&)>&,
                                         std::stop_token) override {
    return kube::WatchSummary{};
  }
  kube::Result<json> Raw(const std::string&, const std::string&,
                         const std::optional<json>&) override {
    return json::object();
  }
};

}  // namespace tj::testing
