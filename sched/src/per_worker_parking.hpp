// PerWorkerParking: every worker sleeps in a parker of its own, its WorkerDriver once drivers
// are attached (per_worker_parking.cpp says how they keep the wake protocol).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "parking.hpp"

namespace arbor::sched {

class Scheduler::PerWorkerParking final : public Scheduler::Parking {
 public:
  explicit PerWorkerParking(Scheduler& s);

  void park(Worker& w) noexcept override;
  bool wake(std::uint32_t s, bool* woke, bool handover) noexcept override;
  void wake_all_for_stop(int started) noexcept override;
  // Opens (or closes) the worker's driver after an attach (detach).
  void begin_pass(Worker& w) noexcept override { sync_own_driver(w); }
  // On this thread, as its open() was.
  void end_loop(Worker& w) noexcept override { close_own_driver(w); }
  // Looks into the worker's own driver, if it has one and something is there.
  bool look(Worker& w, bool inside_item) noexcept override;
  // Nobody else reaps the worker's own driver, so a task yielding in a loop would hold its
  // completions until the worker's periodic look: it looks first (scheduler.hpp).
  void before_yield(Worker& w) noexcept override { look(w, /*inside_item=*/true); }
  void blocking_entered(Worker& w) noexcept override;
  void blocking_covered(Worker& w, Worker* spare) noexcept override;
  void blocking_left(Worker& w) noexcept override;
  bool attach_worker_drivers(WorkerDrivers& drivers) noexcept override;
  void detach_worker_drivers() noexcept override;

 private:
  void withdraw(Worker& w) noexcept;
  void count_in(Worker& w, bool may_search) noexcept;
  void claim_all_sleepers() noexcept;
  void unpark_claimed(Worker& v) noexcept;
  // With `retry`, also asks again for a driver if the worker has none (on its way to park: an
  // open may fail for a moment).
  void sync_own_driver(Worker& w, bool retry = false) noexcept;
  void close_own_driver(Worker& w) noexcept;

  // The sleepers, newest on top, and each worker's Worker::sleep, under sleepers_mutex_ (taken
  // to park, to withdraw and to wake: never on a path that finds work); the attached worker
  // drivers and an epoch bumped by every attach and detach, which workers compare with their
  // own to know when to open or close theirs; drivers open now, for detach_worker_drivers() to
  // wait for.
  std::mutex sleepers_mutex_;
  std::vector<Worker*> sleeper_stack_;
  std::mutex attach_mutex_;  // one attach or detach at a time
  std::atomic<WorkerDrivers*> worker_drivers_{nullptr};
  std::atomic<std::uint64_t> drivers_epoch_{0};
  std::atomic<int> open_drivers_{0};
};

}  // namespace arbor::sched
