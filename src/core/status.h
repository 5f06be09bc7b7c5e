// Errors as values. Every function that input can make fail returns Status or
// StatusOr<T>; the message names the file, field, tensor or parameter at fault.
// No exception crosses a module boundary.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace kvfork {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad input: a malformed file, a wrong request field
  kNotFound,           // a missing file, tensor or key
  kOutOfRange,         // beyond a context, a pool or a table
  kResourceExhausted,  // out of KV blocks, a full queue
  kFailedPrecondition, // the call is not valid in this state
  kUnimplemented,      // an architecture, dtype or construct we do not support
  kCancelled,
  kDataLoss,           // truncated or corrupt data
  kUnavailable,        // not ready yet, shutting down
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message"
  std::string ToString() const;

  // Prefixes context ("loading model.safetensors: ") to the message.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status OutOfRangeError(std::string message);
Status ResourceExhaustedError(std::string message);
Status FailedPreconditionError(std::string message);
Status UnimplementedError(std::string message);
Status CancelledError(std::string message);
Status DataLossError(std::string message);
Status UnavailableError(std::string message);
Status InternalError(std::string message);

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              const std::string& message);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : value_(status) {  // NOLINT: implicit by design
    if (status.ok()) CheckFailed(__FILE__, __LINE__, "!status.ok()", "StatusOr from OK status");
  }
  StatusOr(Status&& status) : value_(std::move(status)) {  // NOLINT
    if (std::get<Status>(value_).ok())
      CheckFailed(__FILE__, __LINE__, "!status.ok()", "StatusOr from OK status");
  }
  StatusOr(const T& value) : value_(value) {}  // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(value_); }
  Status status() const { return ok() ? OkStatus() : std::get<Status>(value_); }

  const T& value() const& { CheckOk(); return std::get<T>(value_); }
  T& value() & { CheckOk(); return std::get<T>(value_); }
  T&& value() && { CheckOk(); return std::get<T>(std::move(value_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void CheckOk() const {
    if (!ok()) CheckFailed(__FILE__, __LINE__, "ok()", std::get<Status>(value_).ToString());
  }
  std::variant<Status, T> value_;
};

}  // namespace kvfork

#define KVFORK_CONCAT_INNER(a, b) a##b
#define KVFORK_CONCAT(a, b) KVFORK_CONCAT_INNER(a, b)

#define KVFORK_RETURN_IF_ERROR(expr)                  \
  do {                                                \
    ::kvfork::Status kvfork_status_ = (expr);         \
    if (!kvfork_status_.ok()) return kvfork_status_;  \
  } while (0)

#define KVFORK_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

// KVFORK_ASSIGN_OR_RETURN(auto x, MakeX());
#define KVFORK_ASSIGN_OR_RETURN(lhs, expr) \
  KVFORK_ASSIGN_OR_RETURN_IMPL(KVFORK_CONCAT(kvfork_statusor_, __LINE__), lhs, expr)

// Always-on invariant checks (not for input validation: use Status for that).
#define KVFORK_CHECK(cond) \
  ((cond) ? (void)0 : ::kvfork::CheckFailed(__FILE__, __LINE__, #cond, ""))
#define KVFORK_CHECK_MSG(cond, msg) \
  ((cond) ? (void)0 : ::kvfork::CheckFailed(__FILE__, __LINE__, #cond, (msg)))
