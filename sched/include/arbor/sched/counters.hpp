// Scheduler counters.
//
// Each worker owns a block of counters that only it writes (a relaxed load and store, no
// read-modify-write, no shared cache line); threads that are not workers share one block
// updated with fetch_add. `Scheduler::counters()` sums the blocks when asked, so reading is
// O(workers) and racy, and counting costs the hot path next to nothing.
#pragma once

#include <atomic>
#include <cstdint>

namespace arbor::sched {

/// A snapshot of the scheduler's activity since it started.
struct SchedulerCounters {
  std::uint64_t submitted = 0;         ///< items submitted (an event tree counts every event in it)
  std::uint64_t run = 0;               ///< items run
  std::uint64_t dropped = 0;           ///< items dropped at stop()
  std::uint64_t parks = 0;             ///< times a worker parked
  std::uint64_t wakes = 0;             ///< times a parked worker was woken for new work
  std::uint64_t steals = 0;            ///< items taken from another worker's local queue
  std::uint64_t spins = 0;             ///< spin phases before parking
  std::uint64_t spins_found_work = 0;  ///< spin phases that ended with work
  std::uint64_t spare_workers = 0;     ///< extra workers started for blocking regions
  std::uint64_t driver_waits = 0;      ///< times a worker waited in the driver instead of parking
  std::uint64_t driver_polls = 0;      ///< looks into the driver without waiting (busy workers)
  /// Items submitted and not yet run or dropped: global + local queues, including the events
  /// packed in trees that have not run yet.
  std::uint64_t queued() const noexcept {
    std::uint64_t done = run + dropped;
    return submitted > done ? submitted - done : 0;
  }
};

namespace detail {

/// One thread's counters. `bump` is for the owning thread, `add` for shared blocks.
struct alignas(64) CounterBlock {
  enum Index {
    submitted,
    run,
    dropped,
    parks,
    wakes,
    steals,
    spins,
    spins_found_work,
    driver_waits,
    driver_polls,
    kCount
  };
  std::atomic<std::uint64_t> values[kCount] = {};

  void bump(Index i, std::uint64_t n = 1) noexcept {
    values[i].store(values[i].load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void add(Index i, std::uint64_t n = 1) noexcept {
    values[i].fetch_add(n, std::memory_order_relaxed);
  }
  void add_to(SchedulerCounters& out) const noexcept {
    auto get = [this](Index i) { return values[i].load(std::memory_order_relaxed); };
    out.submitted += get(submitted);
    out.run += get(run);
    out.dropped += get(dropped);
    out.parks += get(parks);
    out.wakes += get(wakes);
    out.steals += get(steals);
    out.spins += get(spins);
    out.spins_found_work += get(spins_found_work);
    out.driver_waits += get(driver_waits);
    out.driver_polls += get(driver_polls);
  }
};

}  // namespace detail
}  // namespace arbor::sched
