// Event trees: how a batch of completions enters the scheduler.
//
// `submit_event_trees` packs n events into balanced binary trees of at most `max_tree` items
// (so depth at most ceil(log2(max_tree + 1))) and queues all tree roots with one global push.
// A worker that runs a node first pushes the node's children to its own local queue, then
// copies the event out, returns the node to the pool, and only then runs the handler. Idle
// workers steal from the top of that queue, i.e. whole subtrees: the batch spreads by divide
// and conquer instead of by every worker hammering one shared queue, and a handler that blocks
// delays nothing but its own node. The bound keeps a burst from becoming one enormous tree that
// a single worker has to split while p99 latency suffers.
#pragma once

#include <cstddef>
#include <span>

#include "arbor/sched/event_pool.hpp"
#include "arbor/sched/scheduler.hpp"

namespace arbor::sched {

/// Default bound on the items in one tree (see docs/benchmarks.md for how it was chosen).
inline constexpr std::size_t kDefaultMaxTree = 16;

/// Packs `events` into trees of at most `max_tree` items (0 means kDefaultMaxTree) and submits
/// them with one push per chunk of 512. Returns the number of trees submitted. Every event is
/// delivered exactly once: with Disposition::drop if the scheduler is stopping, and in place
/// (Disposition::run, on the calling thread) from the first chunk the pool cannot grow for.
/// With `keep_first` on one of the scheduler's workers, the first tree goes to that worker's
/// local queue instead (it runs it next: a worker that reaped the batch itself).
std::size_t submit_event_trees(Scheduler& scheduler, EventPool& pool, std::span<const Event> events,
                               std::size_t max_tree = 0, bool keep_first = false) noexcept;

/// Depth of the balanced tree submit_event_trees builds for n items: ceil(log2(n + 1)).
constexpr std::size_t event_tree_depth(std::size_t n) noexcept {
  std::size_t depth = 0;
  while (n > 0) {
    n >>= 1;
    ++depth;
  }
  return depth;
}

}  // namespace arbor::sched
