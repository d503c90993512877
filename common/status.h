// Error values instead of exceptions. A Status is OK or carries a message that names the
// object, the field or the file and what is wrong ("reading backup /b/latest: digest
// mismatch"), and a code for the few callers that act on the kind of error (a peer that timed
// out versus one that is gone; a refused key). StatusOr<T> holds a value or an error. Both
// are cheap to move.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tj {

// The kind of an error, where a caller acts on it; most errors are kUnknown (only the message
// matters to whoever reads it). Named after Abseil's codes of the same meaning.
enum class StatusCode {
  kOk,
  kUnknown,
  kDeadlineExceeded,   // a wait, a read or a write ran past its deadline
  kUnavailable,        // the other side is not there: connection refused or closed by it
  kPermissionDenied,   // refused for its credentials (a missing or wrong key)
  kResourceExhausted,  // out of space (ENOSPC, EDQUOT, EFBIG): may succeed once space is freed
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status Error(std::string message) {
    return Status(StatusCode::kUnknown, std::move(message));
  }
  static Status Error(StatusCode code, std::string message) {
    assert(code != StatusCode::kOk && "an error needs an error code");
    return Status(code, std::move(message));
  }

  bool ok() const { return !message_.has_value(); }
  StatusCode code() const { return code_; }
  const std::string& message() const {
    static const std::string kOk = "OK";
    return message_ ? *message_ : kOk;
  }
  // Prefixes context, keeping the code: Status::Error("x").WithContext("reading f") ->
  // "reading f: x".
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + *message_);
  }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::optional<std::string> message_;
};

// A value or an error: the one shape of StatusOr<T> and of the Kubernetes client's
// kube::Result<T> (whose error is an ApiError).
template <typename T, typename E>
class [[nodiscard]] ValueOr {
 public:
  ValueOr(T value) : value_or_error_(std::move(value)) {}  // NOLINT: implicit by design
  ValueOr(E error) : value_or_error_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(value_or_error_); }
  const T& value() const& { return std::get<T>(value_or_error_); }
  T& value() & { return std::get<T>(value_or_error_); }
  T&& value() && { return std::get<T>(std::move(value_or_error_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 protected:
  const E& error() const { return std::get<E>(value_or_error_); }

 private:
  std::variant<T, E> value_or_error_;
};

template <typename T>
class [[nodiscard]] StatusOr : public ValueOr<T, Status> {
 public:
  StatusOr(T value) : ValueOr<T, Status>(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status)                                      // NOLINT: implicit by design
      : ValueOr<T, Status>(std::move(status)) {
    assert(!this->error().ok() && "StatusOr built from an OK status");
  }

  const Status& status() const {
    static const Status kOk;
    return this->ok() ? kOk : this->error();
  }
};

}  // namespace tj

// Returns early from the enclosing function when `expr` (a Status) is an error.
#define TJ_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::tj::Status tj_status_ = (expr);        \
    if (!tj_status_.ok()) return tj_status_; \
  } while (0)
