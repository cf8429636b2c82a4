// Driver: what a worker with nothing to run waits in, instead of the LIFO semaphore, when the
// scheduler has one. The scheduler knows nothing about sockets; io/ implements this interface
// (an engine's epoll set or ring) and attaches it, and from then on the workers drive the
// engine: one worker at a time holds the "poll right" and waits in the kernel for completions,
// the others park on the semaphore as before. A busy worker polls without waiting now and then,
// so completions are not left waiting for a worker to run out of work.
//
// The holder calls wait() and then dispatch() (both only while it holds the poll right, so an
// implementation needs no lock of its own between them); unpark() may be called from any thread.
// The scheduler never calls wait() with a negative timeout unless unpark() can end it.
#pragma once

#include <cstdint>

namespace arbor::sched {

class Driver {
 public:
  /// Waits until completions arrive, unpark() is called, or `timeout_ns` passes (0: look
  /// without waiting; negative: no limit but the driver's own, e.g. its next timer). Keeps what
  /// it reaped for dispatch().
  virtual void wait(std::int64_t timeout_ns) noexcept = 0;
  /// Hands what the last wait() reaped to the scheduler, from the calling worker: the first
  /// event tree to its own local queue (it runs it next), the rest to the global queue.
  virtual void dispatch() noexcept = 0;
  /// Makes the current (or, if none is in progress, the next) wait() return soon.
  virtual void unpark() noexcept = 0;

 protected:
  ~Driver() = default;
};

}  // namespace arbor::sched
