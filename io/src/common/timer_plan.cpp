#include "common/timer_plan.hpp"

#include <algorithm>

#include "arbor/io/clock.hpp"
#include "arbor/sched/scheduler.hpp"
#include "common/timer_queue.hpp"

namespace arbor::io {

TimerPlan::Wait TimerPlan::before_wait(std::int64_t requested_ns, bool idle) noexcept {
  Wait w;
  w.timeout_ns = requested_ns;
  w.look = requested_ns == 0;
  w.deadline = timers_.arm();
  if (w.deadline == kNever) {
    // No timer: no round of looks spans this wait (the caller reports nothing after it), so a
    // round a cancelled timer left half done starts over at the next deadline instead of jumping
    // on its stale first look and nudge (TimerPlan.ANewDeadlineAfterACancelledRoundStartsOver-
    // AtTheFirstLook). reaped() loads before it writes: no shared write with the clock running.
    reaped();
    return w;
  }
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

bool TimerPlan::sleepers_back(sched::Scheduler* sleepers) noexcept {
  return sleepers != nullptr && nudged_.load(std::memory_order_relaxed) &&
         sleepers->sleepers_nudged();
}

bool TimerPlan::settle(bool quiet, sched::Scheduler* sleepers, bool back) noexcept {
  if (!quiet) {  // a look that is not quiet starts over
    reaped();
    return false;
  }
  if (!quiet_look_.load(std::memory_order_relaxed)) {
    quiet_look_.store(true, std::memory_order_relaxed);  // the first: look again in a slice
    return false;
  }
  if (sleepers != nullptr && !back) {
    // The second: nudge the sleepers (refused while one is on its way to sleep: the next look
    // asks again), then wait for them, looking every slice, for as long as every look is quiet.
    if (!nudged_.load(std::memory_order_relaxed) && sleepers->nudge_sleepers())
      nudged_.store(true, std::memory_order_relaxed);
    return false;
  }
  quiet_look_.store(false, std::memory_order_relaxed);
  nudged_.store(false, std::memory_order_relaxed);
  // The next deadline now, not the one armed before the wait: a task may have added an earlier
  // one and parked since (jumping to the armed one skipped it past its deadline:
  // TestClockTest.SleepsWakeExactlyAtTheirDeadlinesInOrder).
  const std::int64_t next = timers_.arm();
  if (next == kNever) return false;  // all cancelled meanwhile
  advance_clock_to(next);
  return true;
}

}  // namespace arbor::io
