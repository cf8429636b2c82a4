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

WorkItem* GlobalQueue::take_all() noexcept {
  std::lock_guard lock(mutex_);
  WorkItem* chain = head_;
  head_ = tail_ = nullptr;
  pops_.store(pops_.load(std::memory_order_relaxed) + size(), std::memory_order_relaxed);
  size_.store(0, std::memory_order_relaxed);
  return chain;
}

}  // namespace arbor::sched
