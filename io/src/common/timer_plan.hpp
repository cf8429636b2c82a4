// TimerPlan: what a wait that watches the timers does about them, the one plan both such waits
// follow: EngineCore::reap (poller 0's wait, or the workers' on the shared epoll set or ring)
// and io_uring's rings (the holder of the timer watch, linux/uring/ring_per_worker.cpp).
//
// Before the wait, before_wait() arms the queue: the deadline the wait sleeps towards is
// recorded under the queue's lock, so a timer added later with an earlier one gets
// Added::queued_earliest and its adder wakes the sleeper, and none is slept through. A paused
// (test) clock moves without telling anyone, so the wait then sleeps in slices and looks at the
// clock after each.
//
// After a wait that reaped nothing, a paused clock jumps to the next deadline if the runtime can
// only be waiting for time (Tokio's auto-advance): every worker parked, nothing queued, and
// nothing ready in the engine that no wait has reaped yet (the caller's `quiet`). The last is a
// look at what the kernel shows, which lags: io_uring clears its "task work pending" flag before
// it posts the completions that work makes, and in workers mode a completion is made on the
// thread that submitted it, which the kernel has woken but which may not have run yet. So the
// clock jumps only on the second quiet look in a row, a slice (200 us) after the first: what was
// on its way at the first has surfaced by then, as a completion or as a worker awake
// (BlockingRegionTest.APausedClockDoesNotJumpPastAPendingCompletion, 4 workers on 2 cores).
// A thread outside the runtime about to submit is a race no look can close; it only moves the
// jump.
#pragma once

#include <atomic>
#include <cstdint>

namespace arbor::io {

class TimerQueue;

class TimerPlan {
 public:
  static constexpr std::int64_t kNever = INT64_MAX;
  /// A paused clock's slice: how long a watcher waits before it looks at the clock again.
  /// Longer on Windows: under wine a loopback receive's completion is posted by wineserver,
  /// which on a loaded machine lags a send's by more than 200 us (the test in the header comment
  /// failed on iocp about one run in two at load ~4.5 with 200 us, and once in a full suite
  /// with 1 ms).
#if defined(_WIN32)
  static constexpr std::int64_t kPausedSliceNs = 5'000'000;
#else
  static constexpr std::int64_t kPausedSliceNs = 200'000;
#endif

  explicit TimerPlan(TimerQueue& timers) noexcept : timers_(timers) {}

  /// What before_wait() decided for one wait.
  struct Wait {
    std::int64_t deadline = kNever;  // the deadline armed (kNever: no timer pending)
    bool paused = false;             // the clock was paused
    std::int64_t timeout_ns = -1;    // for the wait: the caller's, bounded as above
    bool look = false;               // the caller asked for a look without waiting
  };
  /// Arms the queue and bounds `requested_ns` (-1: no limit) by its deadline; paused, by a
  /// slice, or to a look without waiting when `idle` (the scheduler's; callers ask it only while
  /// the clock is paused, since it walks every queue) and no quiet look is armed yet, so that a
  /// jump is not a slice late.
  Wait before_wait(std::int64_t requested_ns, bool idle) noexcept;
  /// After a wait planned by `w` that reaped nothing. Jumps a paused clock to the next deadline
  /// on the second `quiet` wait in a row; one that is not quiet starts over, and a look without
  /// waiting (a busy worker's) counts for neither. True if it jumped.
  bool after_empty_wait(const Wait& w, bool quiet) noexcept;
  /// A wait that watched the timers reaped something: what it reaped is not a quiet look.
  void reaped() noexcept {
    // Loaded first: with the clock running it is always false, and every wait comes here, so
    // the shared line is not written on each one.
    if (quiet_look_.load(std::memory_order_relaxed))
      quiet_look_.store(false, std::memory_order_relaxed);
  }

 private:
  TimerQueue& timers_;
  // A quiet look was seen and the next one may jump. Relaxed: one watcher looks at a time
  // (poller 0, the poll right's holder, or the timer watch's holder), and handing the role on
  // goes through a lock or a seq_cst exchange; a stale value costs one slice, never a wrong jump
  // (the jump itself needs this look's own `quiet`).
  std::atomic<bool> quiet_look_{false};
};

}  // namespace arbor::io
