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
// its first pass, which opens its driver, waited for), and then the driver moves what it still
// watches to the other workers' drivers (WorkerDriver::before_blocking(); io_uring's rings move
// their sockets, cancelling and restarting their pending operations there:
// UringRingsRuntime.ReadsCompleteWhileATaskBlocksItsWorkerInARegion). Entering costs time in
// proportion to what the driver has pending. What cannot move waits for the region's end, as
// it waits for any long item's (SchedulerWorkerDrivers.ACompletionArrivingDuringABlockingRegion-
// RunsAfterIt): with every other worker blocked and no spare to start there is no other driver;
// a connect in progress stays.
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
