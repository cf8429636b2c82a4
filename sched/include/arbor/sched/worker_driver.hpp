// WorkerDriver: a parker a worker owns, for schedulers built with per_worker_parking (an IO
// engine with a ring per worker). Where driver.hpp's Driver is one epoll set or ring watched by
// one worker at a time, here every worker has its own: it waits in it when it has nothing to
// run, looks into it now and then while busy, and is woken in it by whoever needs it awake.
// The scheduler still knows nothing about sockets; io/ implements both interfaces.
//
// Threads: open() and close() run on the worker thread the driver is for; wait(), dispatch(),
// pending(), before_blocking() and after_blocking() only ever on that thread, between its open()
// and close(); unpark() on any thread while the driver is open (the scheduler calls it under the
// lock that orders close()).
//
// Ownership: the WorkerDrivers object owns every driver it opens; a driver is the worker's to
// use from open() to close(), and the scheduler never touches it after close() returns.
#pragma once

#include <cstddef>
#include <cstdint>

namespace arbor::sched {

class WorkerDriver {
 public:
  /// Waits until this worker's completions arrive, unpark() is called, or `timeout_ns` passes
  /// (0: look without waiting; negative: no limit but the driver's own, e.g. the timers it
  /// watches). Keeps what it reaped for dispatch(). True if there is something to dispatch.
  virtual bool wait(std::int64_t timeout_ns) noexcept = 0;
  /// Hands what the last wait() reaped to the scheduler from this worker: the first event tree
  /// to its local queue (it runs it next), the rest to the global queue.
  virtual void dispatch() noexcept = 0;
  /// Cheap (a load or two, no system call): whether a wait(0) would find something, e.g. the
  /// kernel has completions or requests wait for this worker. May say yes spuriously.
  virtual bool pending() const noexcept = 0;
  /// Makes the current (or, if none is in progress, the next) wait() return soon. Sticky.
  virtual void unpark() noexcept = 0;
  /// The worker is about to block (its outermost BlockingRegion begins), inside an item: hand
  /// what this driver watches to the other workers' drivers where it can, so that it does not
  /// wait for the region's end. What that completes is dispatched as from inside an item.
  virtual void before_blocking() noexcept {}
  /// The region ended: the driver takes new work again.
  virtual void after_blocking() noexcept {}

 protected:
  ~WorkerDriver() = default;
};

/// What a scheduler asks for a driver per worker (an engine, in io/).
class WorkerDrivers {
 public:
  /// On worker `worker`'s thread (0 <= worker < the scheduler's workers + spares), before it
  /// waits in the driver for the first time. nullptr: this worker parks on a futex instead,
  /// and asks again each time it parks (a driver may fail to open for a moment).
  virtual WorkerDriver* open(std::size_t worker) noexcept = 0;
  /// On the same thread, once it will not use `driver` again (the drivers are being detached,
  /// or the worker is exiting). Whatever the driver still holds is the driver's to finish.
  virtual void close(std::size_t worker, WorkerDriver& driver) noexcept = 0;

 protected:
  ~WorkerDrivers() = default;
};

}  // namespace arbor::sched
