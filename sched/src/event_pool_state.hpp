// EventPool::State and EventPool::Cache: everything an EventPool holds, in one heap block that
// the pool owns and the claim tables of the threads using its caches (event_pool_claims.hpp)
// reference weakly, so that either may go first.
//
// Invariants:
//   - `shared_idle` is the length of `free`, and never above `shared_bound`; both change only
//     under `mutex`.
//   - A cache is used by at most one thread at a time: the one whose `claimed` exchange from
//     false to true succeeded, until it stores false again at its exit (release; the next
//     claimer's exchange is acquire, so it sees the cache as its predecessor left it: empty).
//   - `count` of a cache is the number of items in items[0..count), never above `cache_items`,
//     and written only by the owning thread (or by ~State, when nobody owns anything any more).
//   - An item moving between a cache and the shared list leaves its source counter before it
//     joins its destination's, so idle(), which reads the shared counter first (acquire) and the
//     caches after it, never counts an item spilled from a cache twice.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "arbor/sched/event_pool.hpp"

namespace arbor::sched {

struct alignas(64) EventPool::Cache {  // its own cache line: only its owner writes it
  std::atomic<std::size_t> count{0};
  std::atomic<bool> claimed{false};
  EventItem** items = nullptr;  // cache_items slots in State::slots
};

struct EventPool::State {
  State(std::size_t capacity, EventPoolCaches shape);
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  /// Frees the shared list and every cache's items: by now no thread uses the pool (its
  /// destructor's contract), and exiting threads hold a strong reference while they flush.
  ~State();

  /// Takes up to n items from the shared list into out[]; returns how many. Under `mutex`.
  std::size_t take_shared_locked(EventItem** out, std::size_t n) noexcept;
  /// Puts items[0..n) on the shared list, up to its bound; returns how many it kept (the caller
  /// frees the others outside the lock). Under `mutex`. The items must be linked in order
  /// through `next` beforehand (done outside the lock), so this is O(1).
  std::size_t put_shared_locked(EventItem** items, std::size_t n) noexcept;
  /// Frees `n` items the bound had no room for, and counts them.
  void free_items(EventItem* const* items, std::size_t n) noexcept;
  /// A thread owning `cache` is exiting: its items go to the shared list (or are freed beyond
  /// the bound), and the cache becomes free for another thread.
  void flush_and_unclaim(Cache& cache) noexcept;

  const std::uint64_t id;
  const std::size_t shared_bound;
  const std::size_t cache_count;
  const std::size_t cache_items;

  std::mutex mutex;
  WorkItem* free = nullptr;                 // linked through WorkItem::next; guarded by mutex
  std::atomic<std::size_t> shared_idle{0};  // length of `free`; stored under mutex with release
  std::atomic<std::uint64_t> allocated{0};
  std::atomic<std::uint64_t> freed{0};
  std::atomic<std::uint64_t> trips{0};  // lock acquisitions of `mutex`, bumped under it
  std::unique_ptr<Cache[]> caches;
  std::unique_ptr<EventItem*[]> slots;  // cache_count * cache_items, carved among the caches
};

}  // namespace arbor::sched
