// GlobalQueue: the multi-producer, multi-consumer queue shared by all workers.
//
// An intrusive FIFO list under a mutex. Producers are external threads, engine pollers and
// overflowing workers; the one hot producer pattern (an engine pushing event trees) already
// batches, so one lock per batch is what matters, and `push_batch` splices a whole chain in
// O(1). Consumers batch too: `pop_batch` takes up to n items from the head in one lock (a worker
// moves them into its local queue, see src/global_batch.hpp), so draining a burst costs one lock
// per batch rather than one per item. The length is mirrored in an atomic so that idle workers
// can poll "anything there?" without touching the lock's cache line.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "arbor/sched/work_item.hpp"

namespace arbor::sched {

class GlobalQueue {
 public:
  void push(WorkItem* item) noexcept { push_batch(item, item, 1); }
  /// Appends the chain first..last (linked through `next`), `count` items long.
  void push_batch(WorkItem* first, WorkItem* last, std::size_t count) noexcept;
  /// The oldest item, or nullptr.
  WorkItem* pop() noexcept;
  /// The oldest min(max, size) items in one lock, linked through `next` oldest first (the last
  /// one's `next` is nullptr); `count` receives how many. nullptr and 0 if empty or max is 0.
  WorkItem* pop_batch(std::size_t max, std::size_t& count) noexcept;
  /// Empties the queue, returning the chain (for shutdown).
  WorkItem* take_all() noexcept;
  /// Racy length: exact when no push or pop is in flight.
  std::size_t size() const noexcept { return size_.load(std::memory_order_relaxed); }
  bool empty() const noexcept { return size() == 0; }
  /// Items popped so far. If it has not moved between two looks at a non-empty queue, the
  /// oldest item waited all that time.
  std::uint64_t pops() const noexcept { return pops_.load(std::memory_order_relaxed); }

 private:
  alignas(64) std::atomic<std::size_t> size_{0};
  std::atomic<std::uint64_t> pops_{0};
  alignas(64) std::mutex mutex_;
  WorkItem* head_ = nullptr;  // guarded by mutex_
  WorkItem* tail_ = nullptr;  // guarded by mutex_
};

}  // namespace arbor::sched
