// SharedParking: one semaphore for the sleepers and one Driver behind a poll right
// (shared_parking.cpp says how they keep the wake protocol).
#pragma once

#include <atomic>

#include "arbor/sync/lifo_semaphore.hpp"
#include "parking.hpp"

namespace arbor::sched {

class Scheduler::SharedParking final : public Scheduler::Parking {
 public:
  explicit SharedParking(Scheduler& s) noexcept : Parking(s) {}

  void park(Worker& w) noexcept override;
  bool wake(std::uint32_t s, bool* woke, bool handover) noexcept override;
  void wake_all_for_stop(int started) noexcept override;
  bool nudge_sleepers() noexcept override;
  bool sleepers_nudged() noexcept override { return sleepers_.nudged(); }
  // Takes the poll right if free, looks into the driver without waiting, hands out what it
  // found and releases the right; false if the right was taken.
  bool look(Worker& w, bool inside_item) noexcept override;
  bool attach_driver(Driver& driver) noexcept override;
  void detach_driver() noexcept override;

 private:
  Driver* try_take_poll_right() noexcept;
  void release_poll_right() noexcept;
  void wait_in_driver(Worker& w, Driver& driver) noexcept;
  void leave_driver(Worker& w) noexcept;
  // On any thread.
  void unpark_driver() noexcept;

  sync::LifoSemaphore sleepers_;
  // The driver (nullptr: none), the right to call it (one thread at a time), and the threads
  // about to unpark it, for detach_driver() to wait for.
  alignas(64) std::atomic<Driver*> driver_{nullptr};
  std::atomic<bool> poll_right_{false};
  std::atomic<int> unparkers_{0};
};

}  // namespace arbor::sched
