// EngineCore: the half of Engine that only the backends see. Every backend (the readiness engine,
// UringEngine, IocpEngine) derives from it; it keeps the hooks a backend implements (wait,
// wake, cancel_parked, ...), the machinery they all share (starting and stopping the polling
// as the io mode says, the poller loop and its reap(), delivery as event trees, the timer
// queue and its plan) and its state. None of it is for users, so none of it is in the public
// engine.hpp, which forward-declares the scheduler and the event pool this header includes.
//
// Invariant: EngineCore is the one class that derives from Engine (Engine's constructor is
// private to it), so every Engine is an EngineCore, and Engine's public members that need this
// state (timers, cancel_all, stop, counters, the event pool) reach it through Engine::core()
// (engine.cpp), a static downcast that cannot be wrong.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <system_error>
#include <thread>
#include <vector>

#include "arbor/io/engine.hpp"
#include "arbor/sched/event_pool.hpp"
#include "arbor/sched/scheduler.hpp"
#include "arbor/sched/worker_driver.hpp"

namespace arbor::io {

class EngineDriver;
class TimerPlan;
class TimerQueue;
struct EngineTestAccess;

class EngineCore : public Engine {
 protected:
  EngineCore(sched::Scheduler& scheduler, EngineOptions options);
  /// Aborts (with a message) if the pollers still run: they may be inside the backend, which is
  /// already destroyed. Only the owner's deleter destroys an engine, after stop().
  ~EngineCore() override;

  /// Waits until events arrive, wake(poller) is called, or timeout_ns passes (-1 = forever);
  /// fills out with at most out.size() events and returns their number. Called by one thread
  /// at a time per poller: its poller thread, or the worker holding the scheduler's poll right.
  virtual std::size_t wait(int poller, std::int64_t timeout_ns,
                           std::span<sched::Event> out) noexcept = 0;
  /// Makes poller's current or next wait() return soon. Any thread.
  virtual void wake(int poller) noexcept = 0;
  /// IoMode::rings: the backend's drivers, one per worker, which start_polling() attaches to
  /// the scheduler; nullptr (the default) if the backend has no such mode.
  virtual sched::WorkerDrivers* worker_drivers() noexcept { return nullptr; }
  /// A timer was queued with the earliest deadline: whoever sleeps towards the previous one
  /// must look again. By default poller 0 does (wake(0)).
  virtual void earlier_deadline() noexcept { wake(0); }
  /// IoMode::rings, after the workers closed their drivers (on the thread calling stop()).
  virtual void on_drivers_detached() noexcept {}
  /// cancel_all()'s backend half: cancel every operation parked in a descriptor. Runs after
  /// cancelling() became true; an operation that reaches a descriptor lock later sees it.
  virtual void cancel_parked() noexcept = 0;
  /// Runs on each poller thread before its first wait() (pollers mode only).
  virtual void on_poller_start(int /*poller*/) noexcept {}
  /// After the last wait() (on the poller thread, or in workers mode on the thread calling
  /// stop()): finish requests made before stop().
  virtual void on_poller_stop(int /*poller*/) noexcept {}
  /// Adds the counters only this backend keeps (EngineCounters::add).
  virtual void backend_counters(EngineCounters& /*counters*/) const noexcept {}
  /// A hint for a paused clock's jump (common/timer_plan.hpp): whether the kernel or a request
  /// queue holds something for this engine that no wait has reaped yet. Any thread; a few loads.
  virtual bool completions_ready() const noexcept { return false; }
  /// Whether the kernel may run this engine's completion work on a worker asleep on the
  /// scheduler's semaphore, where completions_ready() cannot see it: then a paused clock
  /// nudges the sleepers before it jumps (timer_plan.hpp; io_uring's shared ring).
  virtual bool completion_work_on_sleepers() const noexcept { return false; }

  /// Delivers events to the scheduler as trees (or runs them here in inline mode). With
  /// `keep_first` on a worker, the first tree goes to that worker's own queue.
  void deliver(std::span<const sched::Event> events, bool keep_first = false) noexcept;

  /// Starts polling, as the io mode says: the poller threads, or the scheduler's workers (the
  /// engine becomes its driver). Backends call it at the end of their init(). On failure (no
  /// thread to be had) the pollers already started are stopped and the error returned, so the
  /// backend's init() can fail cleanly.
  [[nodiscard]] std::error_code start_polling() noexcept;
  /// How many epoll sets or rings the backend should make: `pollers`, or 1 in workers mode.
  static int poll_sets(const EngineOptions& options) noexcept {
    return options.io_mode == IoMode::pollers ? options.pollers : 1;
  }
  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }
  /// The pending timers (rings mode: every ring's wait takes the expired ones).
  TimerQueue& timer_queue() noexcept { return *timers_; }
  /// How a wait that watches the timers sleeps, and when a paused clock jumps.
  TimerPlan& timer_plan() noexcept { return *timer_plan_; }
  /// Pops up to out.size() timers due at `now` into `out` as the events that fire them (inside
  /// a SubmitBatch, as every timer); returns their number.
  std::size_t take_expired_timers(std::int64_t now, std::span<sched::Event> out,
                                  std::span<Timer*> scratch) noexcept;
  /// Counts one wait that returned `events` events (counters()).
  void count_wait(std::size_t events) noexcept;

  std::atomic<std::uint64_t> wakes_{0};
  std::atomic<std::uint64_t> descriptors_{0};

 private:
  friend class Engine;             // its public members run on this state (engine.cpp)
  friend struct EngineTestAccess;  // tests that feed deliver() directly
  friend class EngineDriver;       // workers mode: reap() and deliver() for the poll right's holder
  void run_poller(int poller) noexcept;
  // IoMode::rings: attaches worker_drivers() to the scheduler (false if it refuses).
  bool attach_worker_drivers(sched::WorkerDrivers& drivers) noexcept;
  // One wait on `poller` plus, on poller 0, the expired timers: returns the events in `events`
  // (room for K IO events and, on poller 0, K timers; `fired` is scratch for the timers).
  std::size_t reap(int poller, std::int64_t timeout_ns, std::span<sched::Event> events,
                   std::span<Timer*> fired) noexcept;

  sched::EventPool pool_;
  const std::unique_ptr<TimerQueue> timers_;     // private to io (common/timer_queue.hpp)
  const std::unique_ptr<TimerPlan> timer_plan_;  // over timers_ (common/timer_plan.hpp)
  std::vector<std::thread> pollers_;
  std::unique_ptr<EngineDriver> driver_;  // workers mode, while attached to the scheduler
  bool worker_drivers_attached_ = false;  // rings mode: detach them at stop()
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> waits_{0}, events_{0}, trees_{0}, largest_{0};
};

}  // namespace arbor::io
