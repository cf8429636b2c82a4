// Event and EventPool: a completion to deliver, and the pool of work items that carry them.
//
// An engine turns each completion into an `Event` (a handler and its arguments);
// submit_event_trees() copies it into an EventItem (private to sched: src/event_item.hpp) taken
// from the pool; items come back to the pool as soon as their event has
// been copied out, before the handler runs, so a pool of a few hundred items serves any load.
//
// The pool is bounded: it keeps at most `capacity` idle items and frees the ones returned
// beyond that. Its size is a counter kept next to the free list (O(1); the pool never walks or
// asks a concurrent container how big it is — the mistake the reference system's reviewers
// caught). acquire() allocates when the pool is empty, so a burst larger than the pool still
// gets its items; they are simply not all kept.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "arbor/sched/work_item.hpp"

namespace arbor::sched {

/// A completion to deliver: `handler(event, disposition)` runs on a worker (or with
/// Disposition::drop if the scheduler stops first). The fields are the handler's to interpret.
struct Event {
  using Handler = void (*)(const Event& event, Disposition disposition) noexcept;
  Handler handler = nullptr;
  void* target = nullptr;
  std::int64_t result = 0;
  std::uint64_t data = 0;
};

/// A node of an event tree; defined privately in sched (src/event_item.hpp).
struct EventItem;

class EventPool {
 public:
  explicit EventPool(std::size_t capacity = 1024) noexcept : capacity_(capacity) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  /// Frees the idle items. Every acquired item must have been released by then.
  ~EventPool();

  /// An idle item, or a new one if none is idle. Throws std::bad_alloc only if allocation fails.
  EventItem* acquire();
  /// Fills out[0..n) in one lock acquisition; allocates the shortfall. All or nothing: if an
  /// allocation fails, the items already taken go back to the pool and std::bad_alloc is thrown.
  void acquire(EventItem** out, std::size_t n);
  /// Returns an item: kept if fewer than capacity() are idle, freed otherwise.
  void release(EventItem* item) noexcept;

  /// Idle items right now. O(1).
  std::size_t idle() const noexcept { return idle_.load(std::memory_order_relaxed); }
  std::size_t capacity() const noexcept { return capacity_; }
  /// Items ever allocated / freed by the pool (for tests and metrics).
  std::uint64_t allocated() const noexcept { return allocated_.load(std::memory_order_relaxed); }
  std::uint64_t freed() const noexcept { return freed_.load(std::memory_order_relaxed); }

 private:
  const std::size_t capacity_;
  std::mutex mutex_;
  WorkItem* free_ = nullptr;          // linked through WorkItem::next; guarded by mutex_
  std::atomic<std::size_t> idle_{0};  // length of free_, written under mutex_
  std::atomic<std::uint64_t> allocated_{0};
  std::atomic<std::uint64_t> freed_{0};
};

}  // namespace arbor::sched
