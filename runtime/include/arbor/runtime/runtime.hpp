// Runtime: the scheduler, one IO engine and its timers, and the tasks running on them.
//
//   arbor::Runtime rt;                       // options from the environment
//   return rt.block_on(main_task(rt));       // in main()
//
// Every spawned task runs under the runtime's context: its stop_token is the runtime's, so
// shutdown() (and the destructor) cancels every pending read, accept and sleep, waits for the
// tasks to finish (up to RuntimeOptions::shutdown_timeout), then stops the engine and joins
// every thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <thread>

#include "arbor/io/engine.hpp"
#include "arbor/io/submit_batch.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/join_handle.hpp"
#include "arbor/runtime/spawn_blocking.hpp"
#include "arbor/runtime/task.hpp"
#include "arbor/sched/scheduler.hpp"

namespace arbor {

namespace detail {
class BlockingPool;
}

struct RuntimeOptions {
  sched::SchedulerOptions scheduler;
  io::EngineOptions engine;
  /// How long shutdown waits for cancelled tasks to finish before it gives up on them.
  std::chrono::milliseconds shutdown_timeout{5000};
  /// The spawn_blocking pool: its thread bound (ARBOR_MAX_BLOCKING_THREADS) and keep-alive.
  BlockingPoolOptions blocking;

  /// Engine options from ARBOR_ENGINE, ARBOR_POLLERS, ... (see io::EngineOptions::from_env),
  /// worker count from ARBOR_WORKERS, the blocking pool's bound from ARBOR_MAX_BLOCKING_THREADS.
  static Result<RuntimeOptions> from_env();
};

class Runtime {
 public:
  /// Options from the environment. Throws std::system_error if they are invalid or the engine
  /// cannot start (the message names the cause); use create() to get the error as a value.
  Runtime();
  explicit Runtime(RuntimeOptions options);
  static Result<std::unique_ptr<Runtime>> create(RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Runs `task` to completion from a thread that is not one of this runtime's workers (e.g.
  /// main) and returns its result or rethrows its exception.
  template <class T>
  T block_on(Task<T> task) {
    if (sched::Scheduler::current() == scheduler_.get())
      throw std::logic_error("arbor::Runtime::block_on called from one of its own workers");
    return spawn(std::move(task)).join_blocking();
  }

  /// Starts `task` on the scheduler. Drop the handle to detach it.
  template <class T>
  JoinHandle<T> spawn(Task<T> task) {
    return spawn_in(std::move(task), &root_);
  }

  /// Like spawn(), but the handle's abort() cancels this one task (and everything it awaits).
  /// Costs a stop source per task and a stop callback per pending operation, which plain
  /// spawn() avoids; the task is still cancelled by shutdown like every other.
  template <class T>
  JoinHandle<T> spawn_abortable(Task<T> task) {
    return spawn_abortable_in(std::move(task), root_);
  }
  /// spawn_abortable() under `outer` (which must outlive the task): stopping `outer` also
  /// cancels the task.
  template <class T>
  JoinHandle<T> spawn_abortable_in(Task<T> task, const TaskContext& outer) {
    return start(std::move(task), nullptr, std::make_unique<detail::StopScope>(outer));
  }

  /// Like spawn(), but the task runs under `context` (which must outlive it).
  template <class T>
  JoinHandle<T> spawn_in(Task<T> task, const TaskContext* context) {
    return start(std::move(task), context, nullptr);
  }

  /// Runs `fn()` on the blocking pool (spawn_blocking.hpp) and returns the handle to await
  /// its result. The job owns a decayed copy of `fn`; the handle and the pool share the job,
  /// which goes when both are done with it. Safe from any thread; after shutdown the job is
  /// not run and awaiting it throws operation_canceled.
  template <class F>
  BlockingHandle<detail::blocking_result_t<F>> spawn_blocking(F&& fn) {
    using T = detail::blocking_result_t<F>;
    auto* job = new detail::BlockingState<std::decay_t<F>, T>(std::forward<F>(fn), this);
    submit_blocking(*job);
    return BlockingHandle<T>(job);
  }
  /// Threads the blocking pool runs now (started on demand, gone after the keep-alive).
  int blocking_threads() const noexcept;

  /// Cancels every task's pending and later operations (they complete with
  /// operation_canceled): the runtime is shutting down. Safe from any thread.
  void request_stop() noexcept;
  std::stop_token stop_token() const noexcept { return stop_.get_token(); }

  /// request_stop(), wait for the tasks, stop the engine and the scheduler. Idempotent and
  /// safe from several threads at once: every call returns only when the shutdown is complete
  /// (the destructor calls it too), except a call re-entered on the thread doing it (from a
  /// stop callback), which returns at once. From one of this runtime's own tasks it only
  /// requests stop: a worker cannot join itself; the destructor (or a call from outside)
  /// completes the shutdown.
  void shutdown() noexcept;

  /// Spawned tasks that have not finished.
  std::int64_t live_tasks() const noexcept { return live_.load(std::memory_order_relaxed); }

  io::Engine& engine() noexcept { return *engine_; }
  sched::Scheduler& scheduler() noexcept { return *scheduler_; }
  const TaskContext& context() const noexcept { return root_; }

 private:
  friend void detail::spawned_finished(Runtime& runtime) noexcept;

  // Starts `task` under `scope`'s context if given (the frame owns the scope), else `context`.
  template <class T>
  JoinHandle<T> start(Task<T> task, const TaskContext* context,
                      std::unique_ptr<detail::StopScope> scope) {
    auto spawned = detail::run_spawned(std::move(task));
    auto h = spawned.handle;
    auto& p = h.promise();
    if (scope != nullptr) {
      context = &scope->context();
      p.scope = std::move(scope);
    }
    p.set_context(context);
    p.runtime = this;
    p.fn = &start_spawned<typename JoinHandle<T>::promise_type>;
    live_.fetch_add(1, std::memory_order_relaxed);
    const bool local = sched::Scheduler::current() == scheduler_.get();
    // Refused (the scheduler is stopping): submit has already dropped the start item, which
    // resumes the task here; it must not be dropped again (see Scheduler::submit).
    scheduler_->submit(static_cast<sched::WorkItem&>(p), local);
    return JoinHandle<T>(h);
  }

  template <class Promise>
  static void start_spawned(sched::WorkItem* item, sched::Disposition) noexcept {
    // Running or dropped (scheduler stopping), the task is resumed: a dropped start only
    // happens after shutdown gave up waiting, and resuming lets it see its cancelled token.
    auto& promise = static_cast<Promise&>(sched::owner_of<detail::SpawnCore>(item));
    io::SubmitBatch batch;
    std::coroutine_handle<Promise>::from_promise(promise).resume();
  }

  void task_finished() noexcept;
  void submit_blocking(detail::BlockingJob& job) noexcept;

  RuntimeOptions options_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::unique_ptr<io::Engine> engine_;
  std::unique_ptr<detail::BlockingPool> blocking_;
  std::stop_source stop_;
  TaskContext root_;
  std::atomic<std::int64_t> live_{0};
  std::mutex shutdown_mutex_;
  std::condition_variable shutdown_progress_;  // live_ reached 0, or a shutdown completed
  enum class Phase { running, shutting_down, shut_down };
  Phase phase_ = Phase::running;      // guarded by shutdown_mutex_
  std::thread::id shutting_down_on_;  // guarded by shutdown_mutex_
};

/// `co_await arbor::yield()`: lets other queued work run, then continues (on any worker).
/// Not a wait on anything, so not cancellable (cancel.hpp): it always continues promptly.
struct yield {
  sched::WorkItem item{&run};
  std::coroutine_handle<> handle;
  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) noexcept {
    Runtime* rt = detail::context_of(h).runtime;
    // Nothing to yield to once the scheduler stops: continue at once.
    if (rt == nullptr || rt->scheduler().stopping()) return false;
    handle = h;
    // Completions only this worker may reap go first (the scheduler knows which those are).
    rt->scheduler().before_yield();
    // Queued or, if stop() began since the check, dropped: run() then has resumed us already,
    // inside this call. Either way we are no longer ours to resume, so stay suspended.
    rt->scheduler().submit(item, /*prefer_local=*/false);
    return true;
  }
  void await_resume() const noexcept {}

 private:
  static void run(sched::WorkItem* self, sched::Disposition) noexcept {
    io::SubmitBatch batch;
    sched::owner_of<yield>(self).handle.resume();
  }
};
static_assert(offsetof(yield, item) == 0, "sched::owner_of<yield> needs the item first");

}  // namespace arbor
