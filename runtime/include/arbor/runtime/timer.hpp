// Timers for tasks: sleep_for, sleep_until, with_timeout.
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

#include "arbor/io/engine.hpp"
#include "arbor/io/submit_batch.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/error.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

using Clock = std::chrono::steady_clock;

namespace detail {

inline std::int64_t to_ns(Clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

class SleepAwaiter : io::Timer {
 public:
  explicit SleepAwaiter(Clock::time_point deadline) noexcept { deadline_ns = to_ns(deadline); }
  SleepAwaiter(const SleepAwaiter&) = delete;

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
  Deadline(Clock::time_point deadline, std::stop_source& source) noexcept : source_(source) {
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
  std::stop_source& source_;
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

}  // namespace detail

/// `co_await sleep_until(t)`: Result<void>; operation_canceled if the task is cancelled.
inline detail::SleepAwaiter sleep_until(Clock::time_point deadline) noexcept {
  return detail::SleepAwaiter(deadline);
}
/// `co_await sleep_for(d)`.
template <class Rep, class Period>
detail::SleepAwaiter sleep_for(std::chrono::duration<Rep, Period> d) noexcept {
  return detail::SleepAwaiter(Clock::now() + std::chrono::duration_cast<Clock::duration>(d));
}

/// Runs `task` with a deadline: when it passes, the task's stop_token is triggered (its
/// pending IO and sleeps complete with operation_canceled) and the result is
/// std::errc::timed_out. Result<T> for a task returning T; a task that already returns
/// Result<U> gives Result<U>. Exceptions from the task propagate.
template <class T, class Rep, class Period>
Task<typename detail::timeout_result<T>::type> with_timeout(std::chrono::duration<Rep, Period> d,
                                                            Task<T> task) {
  const TaskContext& parent = co_await detail::CurrentContext{};
  if (parent.runtime == nullptr) co_return make_error_code(Errc::not_in_runtime);
  std::stop_source source;
  std::stop_callback forward(parent.token, [&source]() noexcept { source.request_stop(); });
  const TaskContext child{parent.runtime, source.get_token()};
  task.set_context(&child);
  io::Engine& engine = parent.runtime->engine();
  detail::Deadline deadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(d), source);
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
  co_await deadline.delivered();
  if (error) std::rethrow_exception(error);
  if constexpr (is_result<T>::value) {
    // A task that succeeded just as the deadline passed keeps its result.
    if (deadline.fired() && !value->has_value())
      co_return std::make_error_code(std::errc::timed_out);
  } else if (deadline.fired()) {
    co_return std::make_error_code(std::errc::timed_out);
  }
  if constexpr (std::is_void_v<T>)
    co_return Result<void>{};
  else
    co_return std::move(*value);
}

}  // namespace arbor
