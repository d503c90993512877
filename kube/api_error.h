// Errors of calls to the Kubernetes API server. An ApiError carries what the server said (its
// metav1.Status: code, reason, message) or, with code 0, why no answer came (connection, TLS,
// timeout). Result<T> holds a value or an ApiError; status() turns the error into a tj::Status
// for callers that only propagate it.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "common/status.h"

namespace tj::kube {

struct ApiError {
  int code = 0;           // HTTP status; 0 when no response arrived
  std::string reason;     // NotFound, AlreadyExists, Conflict, Expired, Gone, Invalid, ...
  std::string message;    // the server's (or the transport's) words
  std::string request;    // "GET /api/v1/namespaces/ns/pods/name"
  int retry_after_s = 0;  // the Retry-After header, when the server sent one

  // "GET /api/v1/...: 404 NotFound: pods \"x\" not found".
  std::string ToString() const;
  Status ToStatus() const { return Status::Error(ToString()); }
};

// Builds an ApiError from a response body, which is a metav1.Status when the server wrote one.
ApiError ApiErrorFromResponse(int http_status, const std::string& body, std::string request);

inline bool IsNotFound(const ApiError& e) { return e.code == 404; }
inline bool IsConflict(const ApiError& e) { return e.code == 409 && e.reason != "AlreadyExists"; }
inline bool IsAlreadyExists(const ApiError& e) {
  return e.code == 409 && e.reason == "AlreadyExists";
}
// 410 Gone, or Expired: the resourceVersion asked for is older than what the server keeps.
inline bool IsGone(const ApiError& e) {
  return e.code == 410 || e.reason == "Expired" || e.reason == "Gone";
}
inline bool IsTransportError(const ApiError& e) { return e.code == 0; }
inline bool IsInvalid(const ApiError& e) { return e.code == 422; }

template <typename T>
class [[nodiscard]] Result : public ValueOr<T, ApiError> {
 public:
  Result(T value) : ValueOr<T, ApiError>(std::move(value)) {}         // NOLINT: implicit by design
  Result(ApiError error) : ValueOr<T, ApiError>(std::move(error)) {}  // NOLINT: implicit by design

  const ApiError& error() const { return ValueOr<T, ApiError>::error(); }
  Status status() const { return this->ok() ? Status::Ok() : error().ToStatus(); }
};

}  // namespace tj::kube
