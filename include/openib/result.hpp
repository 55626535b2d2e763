// Errors as values (public: libopenib returns them): every fallible call returns Result<T>, which the caller
// must look at ([[nodiscard]]). An Error carries an errno-style code, so
// callers can branch on the kind (ENODEV: device gone, EPROTO: malformed
// reply, ETIMEDOUT, ...), and a message with the context a log line needs.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <optional>
#include <variant>

#include <fmt/format.h>

namespace openib {

struct Error {
  int code = 0;         // errno value (ENODEV, EPROTO, EINVAL, ...)
  std::string message;  // human-readable, with context

  std::string str() const {
    return fmt::format("{} ({})", message, std::strerror(code));
  }
};

// Build an Error from a format string: err(ENODEV, "device {} gone", name).
template <typename... Args>
Error err(int code, fmt::format_string<Args...> f, Args&&... args) {
  return Error{code, fmt::format(f, std::forward<Args>(args)...)};
}

// Error from the current errno.
template <typename... Args>
Error sys_err(fmt::format_string<Args...> f, Args&&... args) {
  int e = errno;
  return Error{e, fmt::format(f, std::forward<Args>(args)...)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Result(Error e) : v_(std::in_place_index<1>, std::move(e)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

  const Error& error() const { return std::get<1>(v_); }
  Error&& take_error() { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

// Success holds no Error at all: building and destroying an ok() result
// touches one byte, which matters on the packet path (a header parse makes
// a dozen of them).
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : e_(std::move(e)) {}

  bool ok() const { return !e_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    static const Error none;
    return e_ ? *e_ : none;
  }
  Error take_error() { return e_ ? std::move(*e_) : Error{}; }

 private:
  std::optional<Error> e_;
};

inline Result<void> ok() { return {}; }

}  // namespace openib

// Propagate an error: OPENIB_TRY(expr) returns expr's error from the
// enclosing function; OPENIB_TRY_ASSIGN(var, expr) binds the value.
#define OPENIB_CONCAT_(a, b) a##b
#define OPENIB_CONCAT(a, b) OPENIB_CONCAT_(a, b)
#define OPENIB_TRY(expr)                                      \
  do {                                                        \
    auto openib_try_r_ = (expr);                              \
    if (!openib_try_r_.ok()) return openib_try_r_.take_error(); \
  } while (0)
#define OPENIB_TRY_ASSIGN_IMPL(tmp, var, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.take_error();      \
  var = std::move(tmp).value()
#define OPENIB_TRY_ASSIGN(var, expr) \
  OPENIB_TRY_ASSIGN_IMPL(OPENIB_CONCAT(openib_try_v_, __LINE__), var, expr)
