#include "arbor/sched/event_pool.hpp"

#include <new>

#include "arbor/sched/event_tree.hpp"
#include "event_item.hpp"

namespace arbor::sched {

EventPool::~EventPool() {
  for (WorkItem* item = free_; item != nullptr;) {
    WorkItem* next = item->next;
    delete static_cast<EventItem*>(item);
    item = next;
  }
}

EventItem* EventPool::acquire() {
  EventItem* item = nullptr;
  acquire(&item, 1);
  return item;
}

void EventPool::acquire(EventItem** out, std::size_t n) {
  std::size_t got = 0;
  {
    std::lock_guard lock(mutex_);
    std::size_t idle = idle_.load(std::memory_order_relaxed);
    while (got < n && free_ != nullptr) {
      auto* item = static_cast<EventItem*>(free_);
      free_ = item->next;
      out[got++] = item;
    }
    idle_.store(idle - got, std::memory_order_relaxed);
  }
  try {
    for (; got < n; ++got) {
      out[got] = new EventItem();
      allocated_.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (const std::bad_alloc&) {
    // All or nothing: what was taken goes back, so a failed acquire loses no item.
    for (std::size_t i = 0; i < got; ++i)
      release(out[i]);
    throw;
  }
  for (std::size_t i = 0; i < n; ++i)
    out[i]->pool = this;
}

void EventPool::release(EventItem* item) noexcept {
  {
    std::lock_guard lock(mutex_);
    std::size_t idle = idle_.load(std::memory_order_relaxed);
    if (idle < capacity_) {
      item->next = free_;
      free_ = item;
      idle_.store(idle + 1, std::memory_order_relaxed);
      return;
    }
  }
  delete item;
  freed_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace arbor::sched
