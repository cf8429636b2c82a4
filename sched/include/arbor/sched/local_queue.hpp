// LocalQueue: a worker's bounded work-stealing deque (Chase–Lev, fixed ring).
//
// The owning worker pushes and pops at the bottom (LIFO: the newest item is the one whose data
// is still in cache); any thread steals from the top (FIFO: the oldest item, which for an event
// tree is the largest remaining subtree). The ring never grows: a full queue makes `push` fail
// and the owner moves the older half to the global queue in one batch (`take_older_half`).
//
// Orderings (after Lê, Pop, Cohen, Zappa Nardelli, PPoPP'13), written with seq_cst operations
// instead of standalone fences so that ThreadSanitizer can follow them:
//   push   slot store, then bottom store-release: a thief that reads the new bottom with
//          acquire also sees the slot and everything the producer wrote into the item. A batch
//          push stores all its slots, then bottom once.
//   pop    bottom store, then top load, both seq_cst: owner and thief cannot both miss each
//          other's claim on the last item; that item is then decided by a CAS on top.
//   steal  top load, then bottom load, seq_cst; the CAS on top claims the slot.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "arbor/sched/work_item.hpp"

namespace arbor::sched {

class LocalQueue {
 public:
  /// `capacity` is rounded up to a power of two (at least 2).
  explicit LocalQueue(std::size_t capacity = 256);
  LocalQueue(const LocalQueue&) = delete;
  LocalQueue& operator=(const LocalQueue&) = delete;

  /// Owner only. False if the queue is full (the item is not taken).
  bool push(WorkItem* item) noexcept;
  /// Owner only. Pushes the chain `first` (`count` items linked through `next`) so that pop()
  /// returns them in chain order, with one release of `bottom` for all of them. False, and
  /// nothing taken, if fewer than `count` slots are free.
  bool push_batch(WorkItem* first, std::size_t count) noexcept;
  /// Owner only. The newest item, or nullptr.
  WorkItem* pop() noexcept;
  /// Any thread. The oldest item, or nullptr if empty or another thread won the race.
  WorkItem* steal() noexcept;
  /// Owner only. Removes the older half of the items and returns them linked through `next`,
  /// oldest first; `count` receives how many. Used on overflow.
  WorkItem* take_older_half(std::size_t& count) noexcept;

  /// Position of the oldest item; it moves whenever the oldest item leaves. A thief that sees
  /// the same position twice knows the oldest item waited in between.
  std::int64_t oldest_position() const noexcept { return top_.load(std::memory_order_relaxed); }
  /// Racy size, for heuristics ("is there anything to steal?").
  std::size_t size_estimate() const noexcept;
  std::size_t capacity() const noexcept { return mask_ + 1; }

 private:
  alignas(64) std::atomic<std::int64_t> top_{0};
  alignas(64) std::atomic<std::int64_t> bottom_{0};
  alignas(64) std::unique_ptr<std::atomic<WorkItem*>[]> slots_;
  std::size_t mask_;
};

}  // namespace arbor::sched
