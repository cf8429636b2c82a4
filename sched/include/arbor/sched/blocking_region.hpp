// BlockingRegion: wrap a blocking call made from a work item.
//
//   {
//     arbor::sched::BlockingRegion blocking;
//     ::fsync(fd);   // or a lock wait, a DNS lookup, ...
//   }
//
// While a region is held the worker does not count as awake: its local items are handed to the
// global queue, a parked worker is woken, and if none is parked a spare worker is started (up to
// SchedulerOptions::max_spare_workers), so queued work keeps running. Off a worker thread the
// region does nothing. Not movable: it belongs to the scope that blocks.
//
// With a driver per worker (SchedulerOptions::per_worker_parking: io_uring with a ring per
// worker) nobody else may reap the worker's own driver, so the region hands it over as it
// begins: what has completed is handed to everyone, a sleeper is woken or a spare started (and
// then waited for until its own driver is open: a spare has one too, so even with every worker
// blocked someone watches the IO and the timers), and the driver moves what it still watches to
// the other workers' drivers (WorkerDriver::before_blocking(); io_uring's rings move their
// sockets, cancelling and restarting their pending operations there:
// UringRingsRuntime.ReadsCompleteWhileATaskBlocksItsWorkerInARegion,
// BlockingRegionTest.ATimerFiresWhileTheOnlyWorkerBlocksInARegion). Entering costs time in
// proportion to what the driver has pending, plus a thread's start the first time a spare is
// needed. What cannot move waits for the region's end, as it waits for any long item's
// (SchedulerWorkerDrivers.ACompletionArrivingDuringABlockingRegionRunsAfterIt): a connect in
// progress; and everything when no other driver is open, i.e. every worker and every allowed
// spare blocks (max_spare_workers = 0 with one worker, say). Even then no new socket is given
// to a blocked worker's driver (BlockingRegionTest.WithNoSpareNewSocketsAvoidABlockedWorker).
#pragma once

#include "arbor/sched/scheduler.hpp"

namespace arbor::sched {

class BlockingRegion {
 public:
  BlockingRegion() noexcept : scheduler_(Scheduler::current()) {
    if (scheduler_ != nullptr) scheduler_->enter_blocking();
  }
  ~BlockingRegion() {
    if (scheduler_ != nullptr) scheduler_->leave_blocking();
  }
  BlockingRegion(const BlockingRegion&) = delete;
  BlockingRegion& operator=(const BlockingRegion&) = delete;

 private:
  Scheduler* scheduler_;
};

}  // namespace arbor::sched
