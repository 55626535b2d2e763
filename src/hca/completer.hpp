// A move-only completion callback that is called exactly once (the
// completer pattern of Fuchsia's driver framework). An asynchronous call
// takes one and promises to call it once, later, with a Result; the
// Completer keeps the promise even when its owner breaks it:
//  - destroyed without being called (a queue torn down, a path that forgot
//    it): it completes itself with ECANCELED, logs and counts that;
//  - called a second time: the call is dropped, logged and counted.
// So a waiting continuation is never lost and never resumed twice.
#pragma once

#include <cerrno>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "common/result.hpp"

namespace openib::hca {

// Counters over all completers of the process (a test asserts on them; a
// daemon shows them in logs). Single-threaded use, like the control plane.
struct CompleterStats {
  uint64_t dropped = 0;       // destroyed uncalled: completed with ECANCELED
  uint64_t called_twice = 0;  // second calls, ignored
};
CompleterStats& completer_stats();
void log_completer_misuse(const char* what);

// A move-only type-erased callable (std::function needs copyable targets;
// continuations here own fds and other completers).
template <class Sig>
class UniqueFunction;

template <class R, class... A>
class UniqueFunction<R(A...)> {
 public:
  UniqueFunction() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, UniqueFunction>>>
  UniqueFunction(F f) : p_(std::make_unique<Impl<F>>(std::move(f))) {}
  UniqueFunction(UniqueFunction&&) noexcept = default;
  UniqueFunction& operator=(UniqueFunction&&) noexcept = default;
  explicit operator bool() const { return p_ != nullptr; }
  R operator()(A... a) { return p_->call(std::forward<A>(a)...); }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual R call(A... a) = 0;
  };
  template <class F>
  struct Impl final : Base {
    explicit Impl(F&& fn) : f(std::move(fn)) {}
    R call(A... a) override { return f(std::forward<A>(a)...); }
    F f;
  };
  std::unique_ptr<Base> p_;
};

template <class R>
class Completer;

// Completes with a Result<T>.
template <class T>
class Completer<Result<T>> {
 public:
  using Fn = UniqueFunction<void(Result<T>)>;
  Completer() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Completer>>>
  Completer(F f) : fn_(std::move(f)) {}
  Completer(Completer&& o) noexcept : fn_(std::exchange(o.fn_, Fn{})) {}
  Completer& operator=(Completer&& o) noexcept {
    if (this != &o) {
      drop();
      fn_ = std::exchange(o.fn_, Fn{});
    }
    return *this;
  }
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;
  ~Completer() { drop(); }

  // True until called (or moved from).
  explicit operator bool() const { return static_cast<bool>(fn_); }

  void operator()(Result<T> r) {
    if (!fn_) {
      ++completer_stats().called_twice;
      log_completer_misuse("completer called twice (or after being moved from); call dropped");
      return;
    }
    Fn f = std::exchange(fn_, Fn{});  // cleared first: the callee may re-enter
    f(std::move(r));
  }

 private:
  void drop() {
    if (!fn_) return;
    ++completer_stats().dropped;
    log_completer_misuse("completer destroyed without being called; completing with ECANCELED");
    Fn f = std::exchange(fn_, Fn{});
    f(Result<T>(Error{ECANCELED, "operation abandoned (completer destroyed uncalled)"}));
  }
  Fn fn_;
};

}  // namespace openib::hca
