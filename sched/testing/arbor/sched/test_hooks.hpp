// Test hooks: let a test hold a thread at an exact step of a protocol, which turns a race that
// needs nanoseconds of luck into a deterministic regression test. Unset (the default), a hook
// costs one relaxed load on a path that is about to sleep (or read the clock) anyway, or on a
// rare one. For arbor's own tests only: the header lives in sched/testing, which is never
// installed, and tests reach it through the target arbor_sched_test_hooks (scheduler.cpp,
// which defines the setters, through sched's private include path).
#pragma once

namespace arbor::sched::test_hooks {

/// Called by a worker in SharedParking::park() between steps P1 (it has left the unparked count) and P2 (its
/// re-check of the queues); see scheduler.cpp. nullptr removes it.
void set_inside_park(void (*hook)()) noexcept;

/// Called by a worker in submit() when it starts timing the running item's tail (the wake
/// deferral's evidence, see scheduler.cpp): after the item is queued and any wake is posted,
/// just before the clock starts. nullptr removes it.
void set_tail_clock_start(void (*hook)()) noexcept;

/// Called by a worker in SharedParking::park() after it tried to take the poll right (it holds it or found it
/// taken) and before P1, while it still counts as unparked. nullptr removes it.
void set_before_park_count(void (*hook)()) noexcept;

/// Called by a worker in SharedParking::park() just before it sleeps on the semaphore (P4), after every
/// re-check of P2. nullptr removes it.
void set_before_park_sleep(void (*hook)()) noexcept;

/// Called in release_poll_right() by a worker whose handover (notify_parked, after the
/// release's store) woke nobody. nullptr removes it.
void set_release_unwoken(void (*hook)()) noexcept;

/// Called in release_poll_right() by a worker whose handover woke a sleeper, after its wake.
/// nullptr removes it.
void set_release_woke(void (*hook)()) noexcept;

/// Called by a worker in SharedParking::park() just after it was woken from the semaphore (P4). nullptr
/// removes it.
void set_after_park_wake(void (*hook)()) noexcept;

/// Per-worker parking: called by a waker in notify_parked() once S3 decided to wake (nobody
/// searches, too few awake), before it takes the sleeper stack's lock (S4). nullptr removes it.
void set_before_sleeper_claim(void (*hook)()) noexcept;

/// Called in enter_blocking() by a worker that has just started a spare worker's thread (the
/// spare may already run, and park), still under the lock that serialises spare starts and
/// stop(). nullptr removes it.
void set_spare_started(void (*hook)()) noexcept;

}  // namespace arbor::sched::test_hooks
