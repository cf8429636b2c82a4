#include "common/timer_plan.hpp"

#include <algorithm>

#include "arbor/io/clock.hpp"
#include "common/timer_queue.hpp"

namespace arbor::io {

TimerPlan::Wait TimerPlan::before_wait(std::int64_t requested_ns, bool idle) noexcept {
  Wait w;
  w.timeout_ns = requested_ns;
  w.look = requested_ns == 0;
  w.deadline = timers_.arm();
  if (w.deadline == kNever) return w;
  w.paused = clock_paused();
  // Not deadline - now: for a deadline near time_point::min() that wrapped to centuries, and the
  // poller slept past a timeout long due
  // (TestClockTest.ATimeoutAtTheStartOfTimeFiresAtOnceOnTheRealClock).
  const std::int64_t now = now_ns();
  const std::int64_t left = w.deadline <= now ? 0 : w.deadline - now;
  std::int64_t until = left;
  if (left <= 0 || (w.paused && idle && !quiet_look_.load(std::memory_order_relaxed)))
    until = 0;  // due, or paused and maybe about to jump: look without waiting
  else if (w.paused)
    until = std::min(left, kPausedSliceNs);
  w.timeout_ns = requested_ns < 0 ? until : std::min(requested_ns, until);
  return w;
}

bool TimerPlan::after_empty_wait(const Wait& w, bool quiet) noexcept {
  // A busy worker's look between its items: it is awake, so never quiet, and no watcher's look
  // either. Counting it would start over every time (a livelock of looks, with nobody parked
  // long enough to be seen quiet twice).
  if (w.look) return false;
  if (w.deadline == kNever || !w.paused || !quiet) {
    reaped();
    return false;
  }
  if (!quiet_look_.exchange(false, std::memory_order_relaxed)) {
    quiet_look_.store(true, std::memory_order_relaxed);  // the first: look again in a slice
    return false;
  }
  // The next deadline now, not the one armed before the wait: a task may have added an earlier
  // one and parked since (jumping to the armed one skipped it past its deadline:
  // TestClockTest.SleepsWakeExactlyAtTheirDeadlinesInOrder).
  const std::int64_t next = timers_.arm();
  if (next == kNever) return false;  // all cancelled meanwhile
  advance_clock_to(next);
  return true;
}

}  // namespace arbor::io
