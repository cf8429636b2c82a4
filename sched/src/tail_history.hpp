// TailHistory: how long recently run items kept running after they queued work, per worker.
//
// The invariant it keeps for the wake deferral (Scheduler::submit): an item is called
// `short_tail` only if this worker has timed it before and its recent tails averaged below the
// threshold. An item it has not seen, or whose entry another item took, is `unknown`, never
// short, so a deferral (which leaves queued work waiting for its queuer's return when nobody
// else is awake) is only ever granted on evidence. What counts as a sample is the caller's: the
// scheduler records a tail during which another worker took the queued work as long as can be,
// since the item may have returned soon only because that work ran elsewhere.
//
// Items are remembered by address: a reused item or a coroutine frame is the same "kind of
// work" each time it runs, and the address is only compared, never dereferenced (the item may
// be gone). The table is direct-mapped and small; a collision costs one unknown, which costs a
// wake that may not have been needed, never a wait.
//
// A sample is capped before it is averaged in: a tail stretched by a preemption or a page
// fault (milliseconds on a loaded machine) would otherwise keep a short item classed long for
// dozens of runs, and every one of them would pay a wake for nothing. With the cap, one
// outlier makes the item long for a run or two; an item that is long every time stays long.
#pragma once

#include <cstddef>
#include <cstdint>

#include "arbor/sched/work_item.hpp"

namespace arbor::sched::detail {

class TailHistory {
 public:
  enum class Habit { unknown, short_tail, long_tail };

  /// What this worker knows of `item`'s tail, against `threshold` ticks.
  Habit habit(const WorkItem* item, std::uint64_t threshold) const noexcept {
    const Entry& e = entries_[slot(item)];
    if (e.item != item) return Habit::unknown;
    return e.ticks < threshold ? Habit::short_tail : Habit::long_tail;
  }

  /// Averages `ticks` (capped at `cap`) into `item`'s entry, or starts the entry afresh.
  void record(const WorkItem* item, std::uint64_t ticks, std::uint64_t cap) noexcept {
    if (ticks > cap) ticks = cap;
    Entry& e = entries_[slot(item)];
    e.ticks = e.item == item ? (e.ticks + ticks) / 2 : ticks;
    e.item = item;
  }

 private:
  struct Entry {
    const WorkItem* item = nullptr;
    std::uint64_t ticks = 0;
  };
  static std::size_t slot(const WorkItem* item) noexcept {
    const auto p = reinterpret_cast<std::uintptr_t>(item);
    return ((p >> 4) ^ (p >> 12)) & (kEntries - 1);
  }
  static constexpr std::size_t kEntries = 32;
  Entry entries_[kEntries];
};

}  // namespace arbor::sched::detail
