// Test hooks: let a test hold a thread at an exact step of a protocol, which turns a race that
// needs nanoseconds of luck into a deterministic regression test. Unset (the default), a hook
// costs one relaxed load on a path that is about to sleep (or read the clock) anyway. For tests
// only.
#pragma once

namespace arbor::sched::test_hooks {

/// Called by a worker in park() between steps P1 (it has left the unparked count) and P2 (its
/// re-check of the queues); see scheduler.cpp. nullptr removes it.
void set_inside_park(void (*hook)()) noexcept;

/// Called by a worker in submit() when it starts timing the running item's tail (the wake
/// deferral's evidence, see scheduler.cpp): after the item is queued and any wake is posted,
/// just before the clock starts. nullptr removes it.
void set_tail_clock_start(void (*hook)()) noexcept;

}  // namespace arbor::sched::test_hooks
