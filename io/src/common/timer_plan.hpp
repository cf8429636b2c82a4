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
// it posts the completions that work makes. So the clock jumps only on the second quiet look in
// a row, a slice (200 us) after the first: what was on its way at the first, on a thread that
// runs, has surfaced by then, as a completion or as a worker awake.
//
// That is not enough where the completion work waits for a thread that does not run: on io_uring's
// shared ring (workers mode) the kernel queues a request's completion work to the thread that
// submitted it, for a standing multishot receive the worker that armed it long ago, and the
// ring's one "task work pending" flag is cleared by whichever submitter runs its own. So a
// worker asleep on the scheduler's semaphore may have been woken by the kernel for that work
// and wait for a CPU (4 workers on 2 cores under load), while the ring shows no flag and no
// completion and the scheduler counts it asleep: the clock jumped past the completion it was
// about to post (BlockingRegionTest.APausedClockDoesNotJumpPastAPendingCompletion/uring: 8 of
// 400 runs with two copies at once and 8 of 400 with four, on 2 cores; a longer slice did not
// help; 0 of 400 each with the nudge below, runs interleaved with those). Such an engine passes the
// scheduler as `sleepers`, and the second quiet look, instead of jumping, nudges them
// (Scheduler::nudge_sleepers(): each sleeper makes a system call, and Linux runs a thread's
// pending task work on every return from the kernel); the clock jumps at the first quiet look
// after every nudged sleeper is back (sleepers_nudged()), read before that look's `quiet`: what
// their task work posted is then in the ring for `quiet` to see, and the watcher's own was run
// by that look's wait. A sleeper not yet on the semaphore (counted asleep, on its way) makes the
// nudge refuse, and the next look asks again. What the runtime did before it went idle queues
// its completion work before the nudge (a loopback send queues the receiver's before the send
// completes), unless the kernel itself defers it (a receive left to ksoftirqd under load), which
// no look sees: that is the race below.
//
// A thread outside the runtime about to submit is a race no look can close; it only moves the
// jump.
#pragma once

#include <atomic>
#include <cstdint>

namespace arbor::sched {
class Scheduler;
}

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
  /// on the second quiet wait in a row, or with `sleepers`, on the first quiet one after they
  /// were nudged and are back (the top of this file); one that is not quiet starts over, and a
  /// look without waiting (a busy worker's) counts for none. `quiet()` (every worker parked,
  /// nothing queued, nothing ready in the engine) is asked only for a paused clock's waits
  /// towards a deadline, and after the sleepers' return is read. True if it jumped.
  template <class Quiet>
  bool after_empty_wait(const Wait& w, Quiet&& quiet, sched::Scheduler* sleepers = nullptr) {
    // A busy worker's look between its items: it is awake, so never quiet, and no watcher's
    // look either. Counting it would start over every time (a livelock of looks, with nobody
    // parked long enough to be seen quiet twice).
    if (w.look) return false;
    if (w.deadline == kNever || !w.paused) return settle(false, nullptr, false);
    // Before `quiet` looks: the sleepers' task work, done by their return, is then in the ring.
    const bool back = sleepers_back(sleepers);
    return settle(quiet(), sleepers, back);
  }
  /// A wait that watched the timers reaped something: what it reaped is not a quiet look.
  void reaped() noexcept {
    // Loaded first: with the clock running it is always false, and every wait comes here, so
    // the shared line is not written on each one. `nudged_` is set only while it is true.
    if (quiet_look_.load(std::memory_order_relaxed)) {
      quiet_look_.store(false, std::memory_order_relaxed);
      nudged_.store(false, std::memory_order_relaxed);
    }
  }

 private:
  TimerQueue& timers_;
  // A quiet look was seen and the next one may jump. Relaxed: one watcher looks at a time
  // (poller 0, the poll right's holder, or the timer watch's holder), and handing the role on
  // goes through a lock or a seq_cst exchange; a stale value costs one slice, never a wrong jump
  // (the jump itself needs this look's own `quiet`).
  std::atomic<bool> quiet_look_{false};
  // The sleepers were nudged after a quiet look and no look since was not quiet (only while
  // quiet_look_). Relaxed, as quiet_look_: a stale true is only a watcher that took over the
  // role reading an earlier watcher's nudge, which the semaphore's own count still judges; the
  // jump needs sleepers_nudged() and this look's `quiet`, read in that order.
  std::atomic<bool> nudged_{false};

  // Whether the nudge made after a quiet look is over: every nudged sleeper back.
  bool sleepers_back(sched::Scheduler* sleepers) noexcept;
  // after_empty_wait() once `quiet` is known; `back`: sleepers_back(), read before it.
  bool settle(bool quiet, sched::Scheduler* sleepers, bool back) noexcept;
};

}  // namespace arbor::io
