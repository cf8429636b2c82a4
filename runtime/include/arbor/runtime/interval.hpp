// Interval: a periodic tick for a task, and what happens to the ticks it was too busy to take.
//
// The schedule is a grid: start, start + period, start + 2·period, … A tick taken on time
// moves to the next point of the grid. A tick taken so late that the next point has passed
// too has missed ticks; MissedTicks says what to do about them. The ticks are measured on
// arbor::Clock, so a TestClock drives them like every other timer.
#pragma once

#include <chrono>
#include <coroutine>

#include "arbor/result.hpp"
#include "arbor/runtime/clock.hpp"
#include "arbor/runtime/timer.hpp"

namespace arbor {

/// What an Interval does when a tick is taken after the next one was due already.
enum class MissedTicks {
  burst,  ///< catch up: each missed tick completes at once, then the grid goes on (the default)
  delay,  ///< start again: the next tick is one period after the late one was taken
  skip,   ///< keep the grid: the next tick is the grid's first point after the late one
};

class Interval;

namespace detail {

// `co_await interval.tick()`. Follows cancel.hpp's protocol through the sleep it wraps.
class TickAwaiter {
 public:
  TickAwaiter(Interval& interval, Clock::time_point at) noexcept
      : interval_(interval), sleep_(at) {}
  bool await_ready() const noexcept { return false; }  // a due tick does not suspend, below
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) noexcept {
    return sleep_.await_suspend(h);
  }
  inline Result<Clock::time_point> await_resume() noexcept;

 private:
  Interval& interval_;
  SleepAwaiter sleep_;
};

}  // namespace detail

/// A periodic tick. Movable while no tick() is being awaited; one task ticks it at a time.
class Interval {
 public:
  /// First tick at `start`, then one every `period`. Throws std::invalid_argument unless
  /// period > 0.
  Interval(Clock::time_point start, Clock::duration period,
           MissedTicks missed = MissedTicks::burst);

  /// `co_await tick()`: waits for the next tick. Gives the time it was scheduled for (on the
  /// grid, not when it completed), or operation_canceled when the task is cancelled (the tick
  /// is then not taken: the next tick() waits for it again), or not_in_runtime.
  [[nodiscard]] detail::TickAwaiter tick() noexcept { return {*this, next_}; }
  /// The grid starts again: the next tick is one period from now.
  void reset() noexcept;
  /// When the next tick is due.
  Clock::time_point next() const noexcept { return next_; }
  Clock::duration period() const noexcept { return period_; }
  MissedTicks missed_ticks() const noexcept { return missed_; }

 private:
  friend class detail::TickAwaiter;
  Clock::time_point take() noexcept;  // the tick now due: returns it, moves to the next

  Clock::time_point next_;
  Clock::duration period_;
  MissedTicks missed_;
};

/// An Interval whose first tick is now (it completes at once), then one every `period`.
inline Interval interval(Clock::duration period, MissedTicks missed = MissedTicks::burst) {
  return Interval(Clock::now(), period, missed);
}

Result<Clock::time_point> detail::TickAwaiter::await_resume() noexcept {
  if (auto slept = sleep_.await_resume(); !slept) return slept.error();
  return interval_.take();
}

}  // namespace arbor
