// Timers for tasks: sleep_for, sleep_until, with_timeout.
//
// with_timeout runs any awaitable (a Task, an IO awaiter, a user awaitable following
// cancel.hpp's protocol) in a cancellation scope of its own, and stops that scope when the
// deadline passes: the awaitable is interrupted, not abandoned, and with_timeout returns only
// after it has finished.
//
// All three use the runtime engine's TimerQueue (a heap; see io/src/common/timer_queue.hpp for why)
// and honour the task's stop_token: a cancelled sleep completes at once with operation_canceled.
// Guarantees are "not before": a sleep never ends before its deadline (unless cancelled), and
// timers with earlier deadlines fire no later than those with later ones.
#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <optional>
#include <stop_token>
#include <system_error>

#include "arbor/io/engine.hpp"
#include "arbor/io/submit_batch.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/clock.hpp"
#include "arbor/runtime/error.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/send_result.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

namespace detail {

inline std::int64_t to_ns(Clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Clock::now() + d, held at Clock::time_point::max() (never) when that is past the end of time:
// a plain sum wrapped to a deadline before now, so sleep_for(nanoseconds::max()) ended at once
// and with_timeout(hours::max(), ...) timed out at once
// (TestClockTest.TheLongestDurationsNeverFireInsteadOfFiringAtOnce). Compared in long double,
// exact for 64-bit counts, since converting hours::max() to nanoseconds overflows too. A
// duration not above zero is due now.
template <class Rep, class Period>
Clock::time_point deadline_after(std::chrono::duration<Rep, Period> d) noexcept {
  const Clock::time_point now = Clock::now();
  if (!(d > d.zero())) return now;
  using Wide = std::chrono::duration<long double, std::nano>;
  if (Wide(d) >= Wide(Clock::time_point::max() - now)) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(d);
}

class SleepAwaiter : io::Timer {
 public:
  explicit SleepAwaiter(Clock::time_point deadline) noexcept { deadline_ns = to_ns(deadline); }
  /// Only before it is awaited (e.g. into with_timeout's frame): a queued timer is pinned.
  SleepAwaiter(SleepAwaiter&& other) noexcept { deadline_ns = other.deadline_ns; }
  SleepAwaiter& operator=(SleepAwaiter&&) = delete;

  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) noexcept {
    const TaskContext& ctx = context_of(h);
    if (ctx.runtime == nullptr) {
      result_ = make_error_code(Errc::not_in_runtime);
      return false;
    }
    if (ctx.token.stop_requested()) {
      result_ = std::make_error_code(std::errc::operation_canceled);
      return false;
    }
    if (deadline_ns <= io::now_ns()) return false;
    engine_ = &ctx.runtime->engine();
    handle_ = h;
    handler = &on_event;
    if (ctx.needs_callback()) cancel_.emplace(ctx.token, Canceller{this});
    // Once queued, the timer may fire and resume us on another thread: touch nothing after.
    if (engine_->add_timer(*this)) return true;
    result_ = std::make_error_code(std::errc::operation_canceled);  // cancelled first
    return false;
  }
  Result<void> await_resume() noexcept {
    cancel_.reset();
    return result_;
  }

 private:
  struct Canceller {
    SleepAwaiter* self;
    void operator()() const noexcept { self->engine_->cancel_timer(*self); }
  };
  static void on_event(const sched::Event& event, sched::Disposition) noexcept {
    auto* self = static_cast<SleepAwaiter*>(static_cast<io::Timer*>(event.target));
    if (event.result < 0) self->result_ = errno_code(static_cast<int>(event.result));
    self->handle_.resume();
  }

  io::Engine* engine_ = nullptr;
  std::coroutine_handle<> handle_;
  Result<void> result_;
  std::optional<std::stop_callback<Canceller>> cancel_;
};

// A deadline that requests stop on a stop_source when it fires; awaiting `delivered()` waits
// until its one event (fired or cancelled) has been handled, so its frame may go away.
class Deadline : io::Timer {
 public:
  Deadline(Clock::time_point deadline, StopScope& source) noexcept : source_(source) {
    deadline_ns = to_ns(deadline);
    handler = &on_event;
  }
  /// Queues the deadline. If the engine refuses it (cancel_all() ran: the runtime is stopping),
  /// the deadline counts as delivered and not fired, and the source is stopped at once, so
  /// the task it guards is cancelled like every other and delivered() never waits.
  void arm(io::Engine& engine) {
    if (engine.add_timer(*this)) return;
    source_.request_stop();
    state_.store(kDone, std::memory_order_release);
  }
  void disarm(io::Engine& engine) noexcept { engine.cancel_timer(*this); }
  bool fired() const noexcept { return fired_; }

  struct Delivered {
    Deadline& d;
    bool await_ready() const noexcept { return d.state_.load(std::memory_order_acquire) == kDone; }
    bool await_suspend(std::coroutine_handle<> h) noexcept {
      void* expected = nullptr;
      return d.state_.compare_exchange_strong(expected, h.address(), std::memory_order_acq_rel,
                                              std::memory_order_acquire);
    }
    void await_resume() const noexcept {}
  };
  Delivered delivered() noexcept { return {*this}; }

 private:
  static void on_event(const sched::Event& event, sched::Disposition) noexcept {
    auto* self = static_cast<Deadline*>(static_cast<io::Timer*>(event.target));
    if (event.result == 0) {
      self->fired_ = true;
      self->source_.request_stop();
    }
    void* waiter = self->state_.exchange(kDone, std::memory_order_acq_rel);
    if (waiter != nullptr) std::coroutine_handle<>::from_address(waiter).resume();
  }
  static inline void* const kDone = reinterpret_cast<void*>(std::uintptr_t{1});
  StopScope& source_;
  bool fired_ = false;
  std::atomic<void*> state_{nullptr};
};

template <class T>
struct timeout_result {
  using type = Result<T>;
};
template <class U>
struct timeout_result<Result<U>> {
  using type = Result<U>;
};
// A send's result carries the message back on failure: it stays a SendResult, so that a send
// the deadline cut returns its message (with timed_out) instead of dropping it.
template <class U>
struct timeout_result<SendResult<U>> {
  using type = SendResult<U>;
};
template <class T>
struct is_send_result : std::false_type {};
template <class U>
struct is_send_result<SendResult<U>> : std::true_type {};

}  // namespace detail

/// `co_await sleep_until(t)`: Result<void>; operation_canceled if the task is cancelled.
inline detail::SleepAwaiter sleep_until(Clock::time_point deadline) noexcept {
  return detail::SleepAwaiter(deadline);
}
/// `co_await sleep_for(d)`; a `d` past the end of time sleeps until cancelled.
template <class Rep, class Period>
detail::SleepAwaiter sleep_for(std::chrono::duration<Rep, Period> d) noexcept {
  return detail::SleepAwaiter(detail::deadline_after(d));
}

namespace detail {

template <class T>
Task<typename timeout_result<T>::type> run_with_deadline(Clock::time_point at, Task<T> task) {
  const TaskContext& parent = co_await CurrentContext{};
  if (parent.runtime == nullptr) {
    // A send reports not_in_runtime itself, with its message; nothing else can.
    if constexpr (is_send_result<T>::value)
      co_return co_await std::move(task);
    else
      co_return make_error_code(Errc::not_in_runtime);
  }
  StopScope scope(parent);  // stopping the caller stops the task too
  task.set_context(&scope.context());
  io::Engine& engine = parent.runtime->engine();
  Deadline deadline(at, scope);
  deadline.arm(engine);
  std::exception_ptr error;
  std::optional<std::conditional_t<std::is_void_v<T>, int, T>> value;
  try {
    if constexpr (std::is_void_v<T>) {
      co_await std::move(task);
      value.emplace(0);
    } else {
      value.emplace(co_await std::move(task));
    }
  } catch (...) {
    error = std::current_exception();
  }
  deadline.disarm(engine);
  co_await deadline.delivered();  // its event may still be on its way to this frame
  // An exception thrown because the deadline cancelled the wait (a cancelled join, a user
  // awaitable that throws operation_canceled) is the timeout, not an error.
  if (error && deadline.fired()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::system_error& e) {
      if constexpr (!is_send_result<T>::value) {  // (a send reports, it does not throw)
        if (e.code() == std::errc::operation_canceled)
          co_return make_error_code(std::errc::timed_out);
      }
    } catch (...) {
    }
  }
  if (error) std::rethrow_exception(error);
  if constexpr (is_result<T>::value) {
    // A task that succeeded just as the deadline passed keeps its result.
    if (deadline.fired() && !value->has_value())
      co_return std::make_error_code(std::errc::timed_out);
  } else if constexpr (is_send_result<T>::value) {
    // The same for a send (its message is in the channel: timed_out would invite a duplicate);
    // a failed one hands its message back.
    if (deadline.fired() && !value->has_value())
      co_return T(std::make_error_code(std::errc::timed_out), value->take_message());
  } else if (deadline.fired()) {
    co_return std::make_error_code(std::errc::timed_out);
  }
  if constexpr (std::is_void_v<T>)
    co_return Result<void>{};
  else
    co_return std::move(*value);
}

}  // namespace detail

/// Awaits `awaitable` (a Task, an IO or sleep awaiter, any awaitable following cancel.hpp's
/// protocol; moved in) with a deadline. When the deadline passes, the awaitable's stop token
/// is stopped (its pending waits complete with operation_canceled), with_timeout waits for it
/// to finish, and the result is std::errc::timed_out. An awaitable giving T gives Result<T>;
/// one already giving Result<U> gives Result<U>, and a channel send's SendResult<U> stays a
/// SendResult<U> (cut by the deadline: timed_out, with its message handed back). A Result or
/// SendResult that succeeded just as the deadline passed is kept; a plain T is timed_out once
/// the deadline fired (it cannot say whether it was cut short). Its exceptions propagate, except
/// std::system_error(operation_canceled) caused by the deadline, which becomes timed_out.
/// Cancelling the caller cancels the awaitable too (the result is then its own).
template <class A>
auto with_timeout(Clock::time_point deadline, A awaitable) {
  return detail::run_with_deadline(deadline, detail::as_task(std::move(awaitable)));
}
/// with_timeout(Clock::now() + d, awaitable); a `d` past the end of time never fires.
template <class Rep, class Period, class A>
auto with_timeout(std::chrono::duration<Rep, Period> d, A awaitable) {
  return with_timeout(detail::deadline_after(d), std::move(awaitable));
}

}  // namespace arbor
