// Errors as values. Every fallible call that crosses a library boundary in detrace returns a
// Status or a Result<T>; exceptions never cross a C callback (CUPTI, NCCL profiler, signals).
//
//   Result<int> parse(std::string_view s);
//   DETRACE_ASSIGN_OR_RETURN(int v, parse(text));
//   DETRACE_RETURN_IF_ERROR(writer.flush());
//
// A Status message is one sentence a user can act on: what is wrong, then what to do.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace detrace {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument,   // wrong flag, bad value, mismatched runs
  kNotFound,          // missing file, event, rank
  kNotATrace,         // a file that is not a detrace trace (foreign SQLite, random bytes)
  kVersionMismatch,   // a trace of another schema version
  kCorrupt,           // a damaged or truncated trace
  kNoData,            // a trace file its process never recorded into (empty, cut short as created)
  kIo,                // disk full, permission denied, ...
  kUnavailable,       // no GPU, no CUPTI, another profiler holds CUPTI
  kInternal,          // a bug in detrace
};

const char* errorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool isOk() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return isOk(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes context ("opening runA/rank0.dtrace: ") to the message; no-op on success.
  Status withContext(std::string_view context) const {
    if (isOk()) return *this;
    return {code_, fmt::format("{}: {}", context, message_)};
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

template <typename... Args>
Status makeError(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

// Result<T>: a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T v) : v_(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).isOk() && "Result constructed from an ok Status");
  }

  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }

  const Status& status() const {
    static const Status kOkStatus;
    return isOk() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

inline const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kNotATrace: return "not a detrace trace";
    case ErrorCode::kVersionMismatch: return "version mismatch";
    case ErrorCode::kCorrupt: return "corrupt trace";
    case ErrorCode::kNoData: return "no recorded data";
    case ErrorCode::kIo: return "I/O error";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown";
}

}  // namespace detrace

#define DETRACE_CONCAT_INNER_(a, b) a##b
#define DETRACE_CONCAT_(a, b) DETRACE_CONCAT_INNER_(a, b)

#define DETRACE_RETURN_IF_ERROR(expr)                 \
  do {                                                \
    ::detrace::Status detrace_status_ = (expr);       \
    if (!detrace_status_.isOk()) return detrace_status_; \
  } while (0)

#define DETRACE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.isOk()) return tmp.status();                \
  lhs = std::move(tmp).value()

#define DETRACE_ASSIGN_OR_RETURN(lhs, expr) \
  DETRACE_ASSIGN_OR_RETURN_IMPL_(DETRACE_CONCAT_(detrace_result_, __LINE__), lhs, expr)
