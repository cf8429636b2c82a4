// The scheduler's private parts shared by its source files: the packing of idle_state_, the
// test hooks' slots, and a worker's own state. scheduler.cpp holds the protocol that keeps them
// consistent; parking.hpp how idle workers sleep, in its two shapes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "arbor/sched/local_queue.hpp"
#include "arbor/sched/scheduler.hpp"
#include "arbor/sched/worker_driver.hpp"
#include "arbor/sync/thread_blocker.hpp"
#include "tail_history.hpp"

namespace arbor::sched {
namespace detail {

constexpr std::uint32_t kSearchingOne = 1;
constexpr std::uint32_t kUnparkedOne = 1u << 16;
constexpr std::uint32_t kDriverAsleep = 1u << 31;
constexpr std::uint32_t searching_of(std::uint32_t s) noexcept {
  return s & 0xffffu;
}
constexpr std::uint32_t unparked_of(std::uint32_t s) noexcept {
  return (s >> 16) & 0x7fffu;
}
constexpr bool driver_asleep(std::uint32_t s) noexcept {
  return (s & kDriverAsleep) != 0;
}

// Set by tests (test_hooks.hpp); called at the steps their names say.
extern std::atomic<void (*)()> inside_park_hook;
extern std::atomic<void (*)()> tail_clock_start_hook;
extern std::atomic<void (*)()> before_park_count_hook;
extern std::atomic<void (*)()> before_park_sleep_hook;
extern std::atomic<void (*)()> release_unwoken_hook;
extern std::atomic<void (*)()> release_woke_hook;
extern std::atomic<void (*)()> after_park_wake_hook;
extern std::atomic<void (*)()> before_sleeper_claim_hook;
extern std::atomic<void (*)()> spare_started_hook;

}  // namespace detail

struct Scheduler::Worker {
  Worker(Scheduler& s, std::size_t i, std::size_t capacity, sync::SpinConfig spin,
         std::size_t slots)
      : owner(s),
        queue(capacity),
        spinner(spin),
        rng(static_cast<std::uint32_t>(0x9e3779b9u * (i + 1))),
        seen_oldest(slots, -1),
        index(i) {}

  Scheduler& owner;
  LocalQueue queue;
  detail::CounterBlock counters;
  sync::AdaptiveSpinner spinner;
  sync::FastRandom rng;
  std::uint32_t tick = 0;
  std::uint32_t since_poll = 0;  // items run since this worker last looked into the driver
  bool searching = false;        // mirrors this worker's share of idle_state_'s searching count

  // Wake deferral (see submit()): the item being run, whether it left a wake decision for its
  // end, whether (and since when) its tail is being timed, and what recent items did.
  WorkItem* running = nullptr;
  bool notify_deferred = false;
  bool first_woken = false;  // the running item's first queued item notified at once
  int blocking = 0;  // BlockingRegions open on this worker: it runs nothing queued until they end
  bool timing_tail = false;
  bool tail_local = false;       // the timed item's first queued item went to `queue`
  std::uint64_t tail_taken = 0;  // items_taken() of that queue just before it went in
  std::uint32_t samples = 0;
  std::uint64_t queued_at = 0;
  detail::TailHistory tails;

  // What this worker saw at its previous probe while searching (see steal_work()).
  std::uint64_t seen_global_pops = UINT64_MAX;
  std::vector<std::int64_t> seen_oldest;  // per victim slot
  std::int64_t seen_own_oldest = -1;      // at the previous fairness check (see find_work())

  // Per-worker parking (per_worker_parking.cpp). own_driver and drivers_epoch are this worker's
  // alone; `sleep` is guarded by the scheduler's sleepers_mutex_, and so is own_driver's use by
  // other threads (only while this worker is on the sleeper stack, which it joins under that
  // mutex after its last change of own_driver, so the mutex orders the two).
  enum class Sleep : std::uint8_t { awake, asleep, claimed };
  const std::size_t index;
  WorkerDriver* own_driver = nullptr;
  WorkerDrivers* own_drivers = nullptr;  // what own_driver came from, to close it with
  std::uint64_t drivers_epoch = 0;       // the attach or detach own_driver reflects
  // The drivers whose open() gave this worker none at drivers_epoch (nullptr otherwise): only
  // then does a park ask them again (sync_own_driver()).
  WorkerDrivers* refused = nullptr;
  Sleep sleep = Sleep::awake;
  sync::ThreadBlocker blocker;  // parks here when own_driver is nullptr
  // Set (and notified) once this worker has made its first pass, opening its driver if drivers
  // are attached: a worker entering a region that started it waits for that (enter_blocking()).
  std::atomic<bool> passed_once{false};

  std::thread thread;
};

}  // namespace arbor::sched
