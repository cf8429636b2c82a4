// Scheduler: N workers, each with a local work-stealing deque, sharing one global queue.
//
// A worker looks for work in this order: its local queue, the global queue, the other workers'
// queues (random victim), then it spins for an adaptive while and finally parks on the
// LifoSemaphore. New work wakes a parked worker only when it might otherwise wait: if some
// worker is already searching (stealing or spinning) nobody is woken, at most half the workers
// search at once, and a searcher that finds work wakes the next sleeper only if it was the last
// searcher (the "chain of wakes", as in Tokio). The first item queued by a running item wakes
// nobody until that item returns (its worker runs it next), but only if that item is known to
// return soon after queueing work; an item not seen before, or known to keep running, wakes a
// helper at once. The counts behind those decisions sit in one atomic word; see scheduler.cpp
// for the protocol and its orderings.
//
// With a Driver attached (an IO engine, sched/driver.hpp), the worker that parks while nobody
// holds the driver's poll right waits in the driver instead of on the semaphore, and a busy
// worker looks into it without waiting every kPollInterval items; so completions are reaped
// by the workers that run them, with no thread in between.
//
// Thread safety: every member function may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "arbor/sched/counters.hpp"
#include "arbor/sched/driver.hpp"
#include "arbor/sched/global_queue.hpp"
#include "arbor/sched/work_item.hpp"
#include "arbor/sched/worker_driver.hpp"
#include "arbor/sync/spin.hpp"

namespace arbor::sched {

struct SchedulerOptions {
  /// Worker threads; default: the CPUs this process may run on. 0 or negative is an error.
  std::optional<int> workers;
  /// Extra workers that blocking regions may start; default: as many as `workers`.
  std::optional<int> max_spare_workers;
  /// Capacity of each worker's local queue (rounded up to a power of two).
  std::size_t local_queue_capacity = 256;
  /// Spin policy; default: from ARBOR_SPIN (adaptive when unset).
  std::optional<sync::SpinConfig> spin;
  /// Every worker parks in a parker of its own (its WorkerDriver, worker_driver.hpp, once
  /// attached; a futex until then) instead of the shared LIFO semaphore and one Driver. For an
  /// engine with a ring per worker. attach_driver() is refused with it, and
  /// attach_worker_drivers() without it.
  bool per_worker_parking = false;
};

class Scheduler {
 public:
  /// Starts the workers. Throws std::invalid_argument for bad options.
  explicit Scheduler(SchedulerOptions options = {});
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  /// Calls stop().
  ~Scheduler();

  /// Ownership: submit either queues the item or drops it, exactly once; callers never drop
  /// it again. Dropping means its fn runs with Disposition::drop before submit returns (false),
  /// which happens once stop() has begun; the caller must not touch the item after a true
  /// return, and after a false one the item's fn has already run.
  ///
  /// With `prefer_local` and when called from one of this scheduler's workers, the item goes to
  /// that worker's local queue; otherwise to the global queue. `weight` is what the item adds
  /// to counters().queued: 1 for a plain item, 0 for a part of a batch that was counted when
  /// the batch was submitted.
  bool submit(WorkItem& item, bool prefer_local = false, std::uint64_t weight = 1) noexcept;
  /// Queues the chain first..last (linked through `next`) with one global push; the same
  /// ownership rule as submit(), for every item of the chain. `weight` is what the chain counts
  /// for in counters().queued (an event tree counts all its events).
  bool submit_batch(WorkItem* first, WorkItem* last, std::size_t count,
                    std::uint64_t weight) noexcept;

  /// Stops the workers after the items they are running, joins them, and drops everything
  /// still queued. Returns how many items were dropped. Idempotent, and safe to call from
  /// several threads at once: every call returns only once the workers are joined (the first
  /// returns the count, the others 0). Never from one of its own workers (aborts).
  std::uint64_t stop() noexcept;

  /// True once stop() has begun.
  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }

  /// Summed counters (racy while running, exact after stop()).
  SchedulerCounters counters() const noexcept;
  /// Number of workers (without spares).
  int workers() const noexcept { return workers_; }
  /// Workers plus the spares blocking regions may start: indices 0 .. max_workers() - 1 are
  /// what WorkerDrivers::open() may be asked for.
  int max_workers() const noexcept { return max_workers_; }
  /// Workers parked right now (racy).
  int parked_workers() const noexcept;
  /// Every worker parked (the driver's waiter counts as parked) and nothing queued (racy: a
  /// submit from another thread may be on its way). A paused test clock jumps only then.
  bool idle() const noexcept;
  /// For a paused test clock only (io's TimerPlan, before it jumps): wakes every worker asleep
  /// on the shared sleepers' semaphore once, without counting it awake; each makes a system
  /// call and sleeps again (sync::LifoSemaphore::nudge()). On Linux a thread runs its pending
  /// kernel task work on every return from the kernel, so once sleepers_nudged() says yes,
  /// the completion work io_uring queued for requests those workers submitted is done: a
  /// shared ring runs it on the submitter, which may be a sleeper the kernel woke for it and
  /// that waits for a CPU, with nothing in the ring to show it. False (nobody woken) unless
  /// every worker is parked and each, but the one in the driver, is asleep on the semaphore
  /// (one may be between its count and its sleep): ask again later. With
  /// per_worker_parking nothing is done (true): each worker sleeps in its own driver.
  bool nudge_sleepers() noexcept;
  /// True once every worker the last nudge_sleepers() woke has made its system call since.
  bool sleepers_nudged() noexcept;

  /// From now on an idle worker waits in `driver` while it holds its poll right (see
  /// driver.hpp). The driver must stay valid until detach_driver() returns. At most one driver
  /// at a time: false (nothing changed) if one is attached already.
  [[nodiscard]] bool attach_driver(Driver& driver) noexcept;
  /// Stops using the driver: ends a wait in progress and returns once no thread is inside any
  /// of its functions on the scheduler's behalf; the driver may then be destroyed. Never from
  /// a worker (aborts): a worker may be the one inside it.
  void detach_driver() noexcept;
  /// On a worker of this scheduler while nobody holds the poll right: looks into the driver
  /// without waiting and dispatches what it found. False if it did not (not a worker, no
  /// driver, or the right is taken). For an engine that wants its queued submissions made now.
  /// With per_worker_parking: looks into the calling worker's own driver, if it has one.
  bool poll_driver() noexcept;
  /// On a worker, from a task about to yield: with per_worker_parking nobody else reaps this
  /// worker's own driver, so a task yielding in a loop would hold its completions until the
  /// worker's periodic look (every kPollInterval items). So it looks first (a load or two
  /// unless something is there), as Tokio's yield_now waits for a driver poll
  /// (UringRingsRuntime.AYieldLoopLetsTheWorkersOwnIoComplete). With one shared driver it does
  /// nothing: whoever holds the poll right watches it. Elsewhere it does nothing.
  void before_yield() noexcept;

  /// With per_worker_parking: each worker opens its driver from `drivers` on its own thread at
  /// its next pass through its loop (sleepers are woken for it) and from then on parks in it,
  /// looks into it between items while busy, and is woken in it. `drivers` must stay valid
  /// until detach_worker_drivers() returns. False (nothing changed) without per_worker_parking,
  /// if drivers are attached already, or, on one of its workers, while another attach or a
  /// detach is under way (waiting for a detach that waits for this worker would deadlock).
  [[nodiscard]] bool attach_worker_drivers(WorkerDrivers& drivers) noexcept;
  /// Stops using the worker drivers: returns once every worker has closed its driver on its own
  /// thread (a worker running an item closes it after that item; sleepers are woken for it).
  /// Never from a worker (aborts).
  void detach_worker_drivers() noexcept;
  bool per_worker_parking() const noexcept { return per_worker_; }

  /// The scheduler whose worker is the calling thread, or nullptr.
  static Scheduler* current() noexcept;
  /// Whether the calling thread is a worker with items waiting in its own queue: a racy
  /// estimate (thieves take from it), for heuristics only. False on any other thread.
  static bool work_queued_here() noexcept;

 private:
  struct Worker;
  friend class BlockingRegion;
  static Worker*& this_worker() noexcept;
  // Aborts, naming `function`, if called on one of this scheduler's workers.
  void abort_if_on_worker(const char* function) const noexcept;

  void start_worker(std::size_t index);
  void run_worker(Worker& w) noexcept;
  WorkItem* find_work(Worker& w) noexcept;
  WorkItem* steal_work(Worker& w) noexcept;
  WorkItem* spin_for_work(Worker& w) noexcept;
  void push_local(Worker& w, WorkItem* item) noexcept;
  // S2, then the parking's S3 and S4 (*woke: a sleeper was woken; handover: for
  // SharedParking's release of the poll right, which needs nobody woken while a worker sleeps
  // in the driver: the kernel is watched).
  bool notify_parked(bool* woke = nullptr, bool handover = false) noexcept;
  bool anything_queued() const noexcept;
  // The spare it started, or nullptr.
  Worker* start_spare_if_needed() noexcept;
  bool transition_to_searching(Worker& w) noexcept;
  void transition_from_searching(Worker& w) noexcept;
  void enter_blocking() noexcept;
  void leave_blocking() noexcept;
  detail::CounterBlock& counter_block() noexcept;

  const int workers_;
  const int max_workers_;  // workers_ + spares
  const sync::SpinConfig spin_config_;
  const unsigned cpus_;
  // A running item's first queued item waits for the item's end, waking nobody, only if the
  // item has recently returned within this many ticks of queueing (see submit()).
  const std::uint64_t short_local_ticks_;   // prefer_local items
  const std::uint64_t short_global_ticks_;  // global items

  GlobalQueue global_;
  // Low 16 bits: searching workers; bits 16..30: unparked workers (running, searching or
  // blocked); bit 31: a worker holding the poll right is asleep in the driver. Changed together
  // so that "is anybody searching?", "is anybody asleep?" and "where?" are answered by one load.
  alignas(64) std::atomic<std::uint32_t> idle_state_;
  alignas(64) std::atomic<int> blocked_{0};
  std::atomic<int> started_{0};
  std::atomic<int> submitters_{0};  // external submits in flight, for stop()
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;  // guarded by stop_mutex_

  std::vector<std::unique_ptr<Worker>> slots_;  // max_workers_ entries, started lazily past N
  // Starting a spare and setting stopping_ take lifecycle_mutex_, so no spare starts once
  // stop() has read started_. stop() holds it only for that, never while joining: a worker
  // entering a blocking region takes it too, and stop() is waiting for that worker.
  std::mutex lifecycle_mutex_;
  std::mutex stop_mutex_;  // held for the whole of stop(): a second caller waits for the first
  detail::CounterBlock external_counters_;
  std::atomic<std::uint64_t> spare_workers_started_{0};

  // Where idle workers sleep and how they reach the driver (src/parking.hpp): the one place
  // the two shapes differ, chosen at construction.
  class Parking;
  class SharedParking;
  class PerWorkerParking;
  const bool per_worker_;
  std::unique_ptr<Parking> parking_;
};

}  // namespace arbor::sched
