// arbor::Clock, the clock every timer, sleep, interval and timeout is measured on, and
// TestClock, which pauses it so that tests of timer logic run without waiting.
//
// Clock is steady_clock's time (its time_point is steady_clock's, so the two mix), except
// while a TestClock lives: then it stands still and moves only when the test advances it, or
// when a runtime has nothing left to do but wait for a timer, in which case it jumps to that
// timer's deadline at once (as Tokio's paused clock does). A test of a one-hour timeout thus
// takes microseconds, and checks the same "never before the deadline" guarantees as real time.
#pragma once

#include <chrono>

#include "arbor/io/clock.hpp"

namespace arbor {

/// The timers' clock (a std::chrono Clock).
struct Clock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;
  /// steady_clock::now(), unless a TestClock holds the clock.
  static time_point now() noexcept {
    return time_point(std::chrono::duration_cast<duration>(std::chrono::nanoseconds(io::now_ns())));
  }
};

/// Pauses Clock for the whole process while it lives: for tests, one at a time.
///
/// While paused, Clock::now() moves only by advance(), or by a runtime that is idle (every
/// worker parked, nothing queued, nothing ready in its engine) with a timer pending: its clock
/// jumps to that timer's deadline. So a timeout fires as soon as nothing else can happen, in
/// the order of the deadlines, and never before its deadline on this clock. Waiting on a
/// socket counts as idle: a test that needs real peers to answer in time keeps the real clock.
/// With more than one runtime running, any of them may make the clock jump. Make it before the
/// runtimes it drives: an engine already asleep towards a real deadline sees the pause only
/// when it next wakes.
class TestClock {
 public:
  /// Pauses the clock at its current value. Throws std::logic_error if it is paused already
  /// (another TestClock lives).
  TestClock();
  /// The clock runs again from where it stands; it never goes backwards.
  ~TestClock();
  TestClock(const TestClock&) = delete;
  TestClock& operator=(const TestClock&) = delete;

  /// Moves the clock forward by `d`; timers now due fire (within a fraction of a millisecond
  /// of real time). Throws std::invalid_argument for a negative `d`, std::overflow_error (and
  /// leaves the clock) if now() + d is past Clock::time_point::max().
  void advance(Clock::duration d);
  /// Clock::now().
  Clock::time_point now() const noexcept { return Clock::now(); }
};

}  // namespace arbor
