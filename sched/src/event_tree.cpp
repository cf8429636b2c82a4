#include "arbor/sched/event_tree.hpp"

#include <algorithm>
#include <array>
#include <new>
#include <utility>
#include <vector>

#include "event_item.hpp"

namespace arbor::sched {
namespace {

// Runs (or drops) one node; see event_tree.hpp for why the order of the steps matters.
void run_event_item(WorkItem* self, Disposition disposition) noexcept {
  auto* node = static_cast<EventItem*>(self);
  EventItem* children[2] = {node->right, node->left};
  Scheduler* scheduler = disposition == Disposition::run ? Scheduler::current() : nullptr;
  for (EventItem* child : children) {
    if (child == nullptr) continue;
    if (scheduler != nullptr) {
      // Right first, left last: the owner pops the left subtree next (LIFO), thieves take the
      // right one from the other end. Weight 0: the whole tree was counted when it was queued.
      scheduler->submit(*child, /*prefer_local=*/true, /*weight=*/0);
    } else {
      child->fn(child, disposition);  // dropping, or run outside a worker: recurse in place
    }
  }
  const Event event = node->event;
  node->pool->release(node);
  event.handler(event, disposition);
}

// Builds a balanced tree over nodes[lo, hi) and returns its root.
EventItem* build(EventItem** nodes, std::size_t lo, std::size_t hi) noexcept {
  if (lo >= hi) return nullptr;
  const std::size_t mid = lo + (hi - lo) / 2;
  EventItem* root = nodes[mid];
  root->left = build(nodes, lo, mid);
  root->right = build(nodes, mid + 1, hi);
  return root;
}

}  // namespace

EventItem* pack_event_trees(EventItem** nodes, std::size_t n, std::size_t max_tree,
                            std::size_t& roots) noexcept {
  if (max_tree == 0) max_tree = kDefaultMaxTree;
  WorkItem* first = nullptr;
  WorkItem** link = &first;
  roots = 0;
  for (std::size_t lo = 0; lo < n; lo += max_tree) {
    EventItem* root = build(nodes, lo, std::min(n, lo + max_tree));
    *link = root;
    link = &root->next;
    ++roots;
  }
  *link = nullptr;
  return static_cast<EventItem*>(first);
}

EventItem::EventItem() noexcept : WorkItem(&run_event_item) {}

std::size_t submit_event_trees(Scheduler& scheduler, EventPool& pool, std::span<const Event> events,
                               std::size_t max_tree, bool keep_first) noexcept {
  if (events.empty()) return 0;
  if (max_tree == 0) max_tree = kDefaultMaxTree;
  // Engines harvest a bounded number of completions per wait, so a small stack buffer covers
  // the common case without allocating; a larger batch is processed in chunks of it.
  constexpr std::size_t kChunk = 512;
  std::array<EventItem*, kChunk> nodes;
  std::size_t trees = 0;
  for (std::size_t base = 0; base < events.size(); base += kChunk) {
    std::size_t n = std::min(kChunk, events.size() - base);
    try {
      pool.acquire(nodes.data(), n);  // all or nothing
    } catch (const std::bad_alloc&) {
      // The pool cannot grow (and took nothing). The chunks before this one are queued and
      // run there; the rest run here, once each, rather than be lost.
      const Disposition d = scheduler.stopping() ? Disposition::drop : Disposition::run;
      for (const Event& e : events.subspan(base))
        e.handler(e, d);
      return trees;
    }
    for (std::size_t i = 0; i < n; ++i)
      nodes[i]->event = events[base + i];
    std::size_t roots = 0;
    WorkItem* first = pack_event_trees(nodes.data(), n, max_tree, roots);
    trees += roots;
    if (keep_first && base == 0 && Scheduler::current() == &scheduler) {
      // The first tree holds min(n, max_tree) events; the scheduler counts it as that many.
      WorkItem* rest = std::exchange(first->next, nullptr);
      scheduler.submit(*first, /*prefer_local=*/true, std::min(n, max_tree));
      if (rest == nullptr) continue;
      first = rest;
      --roots;
      n -= std::min(n, max_tree);
    }
    WorkItem* last = first;
    while (last->next != nullptr)
      last = last->next;
    scheduler.submit_batch(first, last, roots, n);
  }
  return trees;
}

}  // namespace arbor::sched
