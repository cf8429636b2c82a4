// Event and EventPool: a completion to deliver, and the pool of work items that carry them.
//
// An engine turns each completion into an `Event` (a handler and its arguments);
// submit_event_trees() copies it into an EventItem (private to sched: src/event_item.hpp) taken
// from the pool; items come back to the pool as soon as their event has
// been copied out, before the handler runs, so a pool of a few hundred items serves any load.
//
// Bound. At most capacity() items are idle, caches included: the shared list keeps at most
// capacity() - caches() * cache_items() of them and each cache at most cache_items(); an item
// returned beyond that is freed. acquire() allocates when nothing is idle, so a burst larger than
// the pool still gets its items; they are simply not all kept. The caches' share comes out of
// the capacity (the default gives them at most half of it), so a pool too small to spare it has
// no caches and behaves exactly like a plain locked list.
//
// Caches (no lock per item). The items of a batch are acquired together by one thread (an
// engine's poller) but released one at a time by the workers that ran them. The shared list is
// under a mutex; each thread that releases items claims one of caches() per-thread caches on its
// first release. A thread that finds none free (or holds caches of four other live pools) uses
// the shared list, as before, for as long as it uses this pool. release() puts
// the item in the thread's cache; a full cache first moves its newest half to the shared list, so
// a worker takes the lock once per cache_items() / 2 releases. acquire() takes from the thread's
// cache first and the shortfall from the shared list in one lock, which also refills an emptied
// cache to half full; only then does it allocate.
//
// Lifetimes. All state (shared list, caches, counters) lives in a heap block that the pool and
// the threads holding claims share: the pool by ownership, each thread's claim table by a weak
// reference and the pool's id, which is never reused. A thread that exits while the pool lives
// moves its cached items to the shared list (freeing those beyond the bound) and frees its cache
// for another thread; a pool destroyed while threads still hold claims frees the items in their
// caches with everything else, and their claims merely expire. Neither side can leave the other
// a dangling pointer or leak an item.
//
// Counting. Sizes are counters kept beside the lists (the pool never walks a list or asks a
// concurrent container how big it is — the mistake the reference system's reviewers caught).
// idle() adds the shared list's counter to one counter per cache, each written only by its owner:
// a fixed number of loads (1 + caches()), no lock. It is exact whenever no acquire or release is
// in flight. During them it is a snapshot taken over a few nanoseconds, like the scheduler's
// counters: it never counts twice an item a cache spills to the shared list (the orderings are
// in src/event_pool_state.hpp), but an item that moves from one counter to another through a
// caller's hands (acquired from the shared list, released into a cache) while idle() reads may be
// seen in both.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

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

/// How an EventPool's caches are shaped; see the bound above.
struct EventPoolCaches {
  std::size_t caches = 0;       ///< per-thread caches (at most EventPool::kMaxCaches)
  std::size_t cache_items = 0;  ///< items each cache holds at most (0: no caches)
  /// The default for `capacity`: 2 caches per CPU (at most kMaxCaches) of up to 32 items, taking
  /// at most half the capacity; none if that leaves fewer than 8 items per cache.
  static EventPoolCaches for_capacity(std::size_t capacity) noexcept;
};

class EventPool {
 public:
  static constexpr std::size_t kMaxCaches = 64;

  /// A pool of at most `capacity` idle items, with the default caches for that capacity.
  /// Allocates its state (std::bad_alloc if that fails), no items.
  explicit EventPool(std::size_t capacity = 1024);
  /// Caches shaped explicitly: `caches.caches * caches.cache_items` must not exceed `capacity`
  /// (std::invalid_argument otherwise, or if caches.caches > kMaxCaches).
  EventPool(std::size_t capacity, EventPoolCaches caches);
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  /// Frees the idle items, those in every thread's cache included. Every acquired item must
  /// have been released by then, and no thread may be inside acquire() or release().
  ~EventPool();

  /// An idle item, or a new one if none is idle. Throws std::bad_alloc only if allocation fails.
  /// The caller owns the item it returns until it hands it to release().
  EventItem* acquire();
  /// Fills out[0..n): from this thread's cache, then from the shared list in one lock
  /// acquisition; allocates the shortfall. All or nothing: if an allocation fails, the items
  /// already taken go back to the pool and std::bad_alloc is thrown.
  /// The caller owns out[0..n) once it returns (and nothing if it throws).
  void acquire(EventItem** out, std::size_t n);
  /// Returns an item: kept (in this thread's cache or the shared list) within the bound, freed
  /// beyond it. From this call on the pool owns `item`, wherever it sits, and the caller must not
  /// touch it again.
  void release(EventItem* item) noexcept;

  /// Idle items right now, in the shared list and the caches; see "Counting" above.
  std::size_t idle() const noexcept;
  /// The part of idle() sitting in per-thread caches.
  std::size_t cached() const noexcept;
  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t caches() const noexcept { return caches_; }
  std::size_t cache_items() const noexcept { return cache_items_; }
  /// Items ever allocated / freed by the pool, and times its shared list's lock was taken (for
  /// tests and metrics).
  std::uint64_t allocated() const noexcept;
  std::uint64_t freed() const noexcept;
  std::uint64_t shared_trips() const noexcept;

  struct State;  // private to sched (src/event_pool_state.hpp)
  struct Cache;

 private:
  Cache* own_cache() const noexcept;
  Cache* claim_cache() noexcept;
  std::size_t spill(Cache& cache, std::size_t count) noexcept;

  const std::size_t capacity_;
  const std::size_t caches_;
  const std::size_t cache_items_;
  const std::shared_ptr<State> state_;  // shared with the claim tables of threads using caches
  const std::uint64_t id_;              // never reused: how a claim recognises its pool
};

}  // namespace arbor::sched
