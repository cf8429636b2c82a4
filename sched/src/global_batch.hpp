// Taking work from the global queue in batches (as Tokio's workers take from their inject queue).
//
// A worker that finds the global queue non-empty takes up to
//     min(global size / workers + 1, half its local queue's capacity, its free slots + 1)
// items under one lock: its fair share of what is waiting, so a burst spreads over the workers
// instead of all going to the first one awake. It runs the oldest at once and pushes the rest
// into its local queue so that it pops them oldest first; searching workers can steal them from
// there like any local work. The invariant: every item taken is either returned or pushed, and
// never more are taken than the local queue has room for, so a nearly full local queue makes the
// batch smaller, never loses or requeues an item. Owner only (it pushes to `local`).
//
// Fairness. Once a batch is in the local queue, newer local work is pushed on top of it, and the
// owner pops the newest first: a chain of local work (an item that keeps queueing its successor
// locally) would keep the batch waiting, where in the global queue the fairness check (every
// 61st item) would have reached it. So the fairness check, when the global queue is empty, also
// takes the local queue's oldest item if that item was already the oldest at the previous check
// (`take_waiting_oldest`). An item that has not waited a whole interval is left alone, so a batch
// being run in order is not reordered.
#pragma once

#include <cstddef>
#include <cstdint>

#include "arbor/sched/global_queue.hpp"
#include "arbor/sched/local_queue.hpp"

namespace arbor::sched {

/// How many items pop_global_batch takes: see above. At least 1 while anything is queued.
std::size_t global_batch_size(std::size_t queued, std::size_t workers, std::size_t local_capacity,
                              std::size_t local_free) noexcept;

/// The oldest global item, or nullptr; with up to global_batch_size(...) - 1 more moved into
/// `local` (whose owner must be the caller), to be popped in their global order.
WorkItem* pop_global_batch(GlobalQueue& global, LocalQueue& local, std::size_t workers) noexcept;

/// For the owner's fairness check: the oldest item of `local` if it was already the oldest at
/// the previous call (its position equals `seen`), else nullptr. Records in `seen` the oldest
/// position now (-1 if empty) for the next call.
WorkItem* take_waiting_oldest(LocalQueue& local, std::int64_t& seen) noexcept;

}  // namespace arbor::sched
