// Parking: where an idle worker sleeps, how a waker reaches it, and how the workers reach the
// IO driver. The scheduler's wake protocol (scheduler.cpp: the counts in idle_state_ and the
// steps S1-S3, P1-P3, T1, T2) decides *whether* a worker sleeps or is woken; a Parking decides
// *where*. The scheduler picks one at construction (SchedulerOptions::per_worker_parking) and
// from then on asks nothing about which it has: every difference between the two shapes is a
// call through this interface.
//   - SharedParking (shared_parking.cpp): sleepers on one LifoSemaphore; one Driver (an
//     engine's epoll set or shared ring), waited in by the parker that holds the poll right.
//     Model-checked by sched/model/park_notify.pml and poll_right_release.pml.
//   - PerWorkerParking (per_worker_parking.cpp): each worker in a parker of its own (its
//     WorkerDriver, e.g. its io_uring ring, or a ThreadBlocker), sleepers on a stack.
//     Model-checked by sched/model/worker_drivers.pml.
// Two strategies, not one protocol: the shared shape wakes an anonymous sleeper with a CAS and
// a semaphore, lock-free; the per-worker shape must reach one particular parker (a ring only
// its owner may reap), which needs the stack and its mutex (docs/architecture.md, "Parking,
// the seam").
//
// Calls come from the worker named in them unless a comment says otherwise. The cost of the
// indirection is a virtual call per pass of the worker loop and per wake, measured in
// docs/benchmarks.md (perf/compare-spawn, perf/roundtrip).
#pragma once

#include <cstdint>

#include "arbor/sched/driver.hpp"
#include "arbor/sched/scheduler.hpp"
#include "arbor/sched/worker_driver.hpp"
#include "worker.hpp"

namespace arbor::sched {

class Scheduler::Parking {
 public:
  explicit Parking(Scheduler& s) noexcept : s_(s) {}
  virtual ~Parking() = default;
  Parking(const Parking&) = delete;
  Parking& operator=(const Parking&) = delete;

  /// The worker found no work: P1 to P4. Returns once it is counted back in (woken, or back at
  /// P3 with work to cover), with `w.searching` saying how it was counted.
  virtual void park(Worker& w) noexcept = 0;
  /// S3 and S4, on any thread, after the caller's S2 fence and its load `s` of idle_state_:
  /// counts and posts a wake if the rule says so. True if the work is covered (a wake was
  /// posted, or someone searches, or enough are awake); false if nobody sleeps to be woken.
  /// `handover`: the caller just released the shared poll right (SharedParking only).
  virtual bool wake(std::uint32_t s, bool* woke, bool handover) noexcept = 0;
  /// stop(), after stopping_ is set: ends every sleep, now and later, of `started` workers.
  virtual void wake_all_for_stop(int started) noexcept = 0;
  /// Scheduler::nudge_sleepers() and sleepers_nudged(), on any thread (scheduler.hpp); a shape
  /// whose sleepers need no nudge does nothing.
  virtual bool nudge_sleepers() noexcept { return true; }
  virtual bool sleepers_nudged() noexcept { return true; }

  /// At the top of every pass of the worker loop, and before its first.
  virtual void begin_pass(Worker&) noexcept {}
  /// After the worker loop's last pass, on the worker's thread.
  virtual void end_loop(Worker&) noexcept {}
  /// Looks into the driver without waiting and hands out what it found; true if it did. From
  /// inside an item (`inside_item`: the item's end settles the wake) or between items.
  virtual bool look(Worker& w, bool inside_item) noexcept = 0;
  /// A task on `w` is about to yield.
  virtual void before_yield(Worker&) noexcept {}

  /// enter_blocking(), after the worker's local items went to the global queue and before it
  /// wakes or starts a helper.
  virtual void blocking_entered(Worker&) noexcept {}
  /// enter_blocking(), after the wake: `spare` is the spare it started, or nullptr.
  virtual void blocking_covered(Worker&, Worker* /*spare*/) noexcept {}
  /// leave_blocking(), after the worker's count of open regions went down.
  virtual void blocking_left(Worker&) noexcept {}

  /// Scheduler's public driver calls, on any thread (scheduler.hpp has their contracts); a
  /// shape that has no such driver refuses (false) or does nothing.
  virtual bool attach_driver(Driver&) noexcept { return false; }
  virtual void detach_driver() noexcept {}
  virtual bool attach_worker_drivers(WorkerDrivers&) noexcept { return false; }
  virtual void detach_worker_drivers() noexcept {}

 protected:
  /// Runs `dispatch` (the driver's hand-out of what it reaped) with the wake decision both
  /// shapes make: from inside an item, that item's end settles it; between items, the worker
  /// runs the first tree next (it went to its local queue), so a wake is owed only for a
  /// surplus, as at an item's end in run_worker().
  template <class Dispatch>
  void hand_out(Worker& w, bool inside_item, Dispatch&& dispatch) noexcept {
    if (!inside_item) {
      w.running = nullptr;
      w.notify_deferred = false;
      w.first_woken = false;
    }
    dispatch();
    if (!inside_item && w.notify_deferred) {
      w.notify_deferred = false;
      if (w.queue.size_estimate() + s_.global_.size() > 1) s_.notify_parked();
    }
    w.since_poll = 0;
  }

  Scheduler& s_;
};

}  // namespace arbor::sched
