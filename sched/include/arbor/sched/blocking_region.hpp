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
// worker) the worker's own driver has nobody else to reap it: what has completed when the
// region begins is handed to everyone, but what completes during the region waits for its end,
// as it waits for any long item's. So do not block in a region on IO of the same runtime there
// (SchedulerWorkerDrivers.ACompletionArrivingDuringABlockingRegionRunsAfterIt).
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
