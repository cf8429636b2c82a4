// BlockingPool: the threads behind Runtime::spawn_blocking.
//
// Invariants: at most `max_threads` threads run; none is started before the first job (a
// runtime that never blocks pays one allocation, no thread); an idle thread exits after
// `keep_alive` without a job; every queued job is either run by a pool thread or, once the
// pool is closed, completed unstarted (its awaiter gets operation_canceled) — never lost.
//
// The queue is an intrusive FIFO of the jobs themselves (BlockingJob::next), so queueing never
// allocates; it is unbounded, like Tokio's, and documented so (BlockingPoolOptions).
// A job that arrives when a thread is idle claims it (`idle` -> `notified`, Tokio's scheme), so
// a burst does not start a thread per job while idle ones exist; otherwise it starts a thread
// if the bound allows, else waits for a busy one to finish.
//
// Shutdown (Runtime::shutdown, after the tasks have ended): queued jobs are dropped, running
// ones are waited for up to RuntimeOptions::shutdown_timeout, then abandoned: their threads
// are detached and keep the pool's state alive (shared_ptr) until their function returns, so a
// job that never ends cannot hang the runtime's destructor and nothing is freed under it. A job
// may shut its own runtime down: its thread is not waited for (it would be waiting for itself).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "arbor/runtime/spawn_blocking.hpp"

namespace arbor::detail {

class BlockingPool {
 public:
  explicit BlockingPool(BlockingPoolOptions options);
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  /// Takes the pool's reference to `job`: it runs, or (pool closed) completes unstarted.
  void submit(BlockingJob& job) noexcept;
  /// Closes the pool: drops queued jobs, waits up to `timeout` for running ones, joins or
  /// abandons the threads. Idempotent.
  void shutdown(std::chrono::milliseconds timeout) noexcept;
  /// Threads alive now (busy or idle).
  int threads() const noexcept;

 private:
  struct State;
  static void thread_main(std::shared_ptr<State> state) noexcept;
  std::shared_ptr<State> state_;
};

}  // namespace arbor::detail
