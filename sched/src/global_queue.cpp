#include "arbor/sched/global_queue.hpp"

namespace arbor::sched {

void GlobalQueue::push_batch(WorkItem* first, WorkItem* last, std::size_t count) noexcept {
  last->next = nullptr;
  std::lock_guard lock(mutex_);
  if (tail_ != nullptr) {
    tail_->next = first;
  } else {
    head_ = first;
  }
  tail_ = last;
  // Relaxed is enough: the size only hints; the items themselves are handed over by the mutex.
  size_.store(size_.load(std::memory_order_relaxed) + count, std::memory_order_relaxed);
}

WorkItem* GlobalQueue::pop() noexcept {
  if (empty()) return nullptr;
  std::lock_guard lock(mutex_);
  WorkItem* item = head_;
  if (item == nullptr) return nullptr;
  head_ = item->next;
  if (head_ == nullptr) tail_ = nullptr;
  size_.store(size_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  pops_.store(pops_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  item->next = nullptr;
  return item;
}

WorkItem* GlobalQueue::pop_batch(std::size_t max, std::size_t& count) noexcept {
  count = 0;
  if (max == 0 || empty()) return nullptr;
  std::lock_guard lock(mutex_);
  WorkItem* first = head_;
  if (first == nullptr) return nullptr;
  // Walking the chain under the lock costs one pointer chase per item, still far less than a
  // lock round trip per item; the caller bounds `max` (half a local queue at most).
  WorkItem* last = first;
  std::size_t n = 1;
  for (; n < max && last->next != nullptr; ++n)
    last = last->next;
  head_ = last->next;
  if (head_ == nullptr) tail_ = nullptr;
  last->next = nullptr;
  size_.store(size_.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
  pops_.store(pops_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  count = n;
  return first;
}

WorkItem* GlobalQueue::take_all() noexcept {
  std::lock_guard lock(mutex_);
  WorkItem* chain = head_;
  head_ = tail_ = nullptr;
  pops_.store(pops_.load(std::memory_order_relaxed) + size(), std::memory_order_relaxed);
  size_.store(0, std::memory_order_relaxed);
  return chain;
}

}  // namespace arbor::sched
