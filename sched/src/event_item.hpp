// EventItem: a node of an event tree, the pooled work item that carries one Event. Private to
// sched: engines hand over Events (submit_event_trees) and never see the items; tests reach this
// header from the source tree.
#pragma once

#include <cstddef>

#include "arbor/sched/event_pool.hpp"

namespace arbor::sched {

struct EventItem : WorkItem {
  EventItem() noexcept;
  Event event;
  EventItem* left = nullptr;
  EventItem* right = nullptr;
  EventPool* pool = nullptr;
};

/// Links nodes[0..n) into balanced trees of at most `max_tree` nodes each (left, right) and
/// returns the roots chained through `next`, in order; `roots` receives their number.
EventItem* pack_event_trees(EventItem** nodes, std::size_t n, std::size_t max_tree,
                            std::size_t& roots) noexcept;

}  // namespace arbor::sched
