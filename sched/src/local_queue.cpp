#include "arbor/sched/local_queue.hpp"

#include <bit>

namespace arbor::sched {

LocalQueue::LocalQueue(std::size_t capacity)
    : slots_(
          std::make_unique<std::atomic<WorkItem*>[]>(std::bit_ceil(capacity < 2 ? 2 : capacity))),
      mask_(std::bit_ceil(capacity < 2 ? 2 : capacity) - 1) {}

bool LocalQueue::push(WorkItem* item) noexcept {
  std::int64_t b = bottom_.load(std::memory_order_relaxed);
  std::int64_t t = top_.load(std::memory_order_acquire);
  if (b - t > static_cast<std::int64_t>(mask_)) return false;
  slots_[static_cast<std::size_t>(b) & mask_].store(item, std::memory_order_relaxed);
  bottom_.store(b + 1, std::memory_order_release);
  return true;
}

bool LocalQueue::push_batch(WorkItem* first, std::size_t count) noexcept {
  std::int64_t b = bottom_.load(std::memory_order_relaxed);
  std::int64_t t = top_.load(std::memory_order_acquire);
  // top only grows while we are here (thieves take; only the owner adds), so the room seen now
  // is a lower bound on the room when the slots are written.
  if (static_cast<std::int64_t>(count) > static_cast<std::int64_t>(mask_ + 1) - (b - t))
    return false;
  // The owner pops from the bottom: the chain's first item goes into the highest slot.
  WorkItem* item = first;
  for (std::int64_t i = b + static_cast<std::int64_t>(count) - 1; i >= b; --i) {
    slots_[static_cast<std::size_t>(i) & mask_].store(item, std::memory_order_relaxed);
    item = item->next;
  }
  bottom_.store(b + static_cast<std::int64_t>(count), std::memory_order_release);
  return true;
}

WorkItem* LocalQueue::pop() noexcept {
  std::int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
  bottom_.store(b, std::memory_order_seq_cst);
  std::int64_t t = top_.load(std::memory_order_seq_cst);
  if (t > b) {  // empty
    bottom_.store(b + 1, std::memory_order_relaxed);
    return nullptr;
  }
  WorkItem* item = slots_[static_cast<std::size_t>(b) & mask_].load(std::memory_order_relaxed);
  if (t == b) {
    // Last item: race the thieves for it through top.
    if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst,
                                      std::memory_order_relaxed))
      item = nullptr;
    bottom_.store(b + 1, std::memory_order_relaxed);
  }
  return item;
}

WorkItem* LocalQueue::steal() noexcept {
  std::int64_t t = top_.load(std::memory_order_seq_cst);
  std::int64_t b = bottom_.load(std::memory_order_seq_cst);
  if (t >= b) return nullptr;
  WorkItem* item = slots_[static_cast<std::size_t>(t) & mask_].load(std::memory_order_relaxed);
  if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed))
    return nullptr;
  return item;
}

WorkItem* LocalQueue::take_older_half(std::size_t& count) noexcept {
  for (;;) {
    std::int64_t t = top_.load(std::memory_order_acquire);
    std::int64_t b = bottom_.load(std::memory_order_relaxed);
    std::int64_t n = (b - t) / 2;
    if (n <= 0) {
      count = 0;
      return nullptr;
    }
    // Claim the slots first: until the CAS succeeds a thief may own any of these items, and
    // writing their `next` links would race with it. Once claimed, only the owner (us) could
    // overwrite the slots, so reading them afterwards is safe.
    if (!top_.compare_exchange_strong(t, t + n, std::memory_order_seq_cst,
                                      std::memory_order_relaxed))
      continue;
    WorkItem* first = nullptr;
    WorkItem** link = &first;
    for (std::int64_t i = t; i < t + n; ++i) {
      WorkItem* item = slots_[static_cast<std::size_t>(i) & mask_].load(std::memory_order_relaxed);
      *link = item;
      link = &item->next;
    }
    *link = nullptr;
    count = static_cast<std::size_t>(n);
    return first;
  }
}

std::size_t LocalQueue::size_estimate() const noexcept {
  std::int64_t b = bottom_.load(std::memory_order_relaxed);
  std::int64_t t = top_.load(std::memory_order_relaxed);
  return b > t ? static_cast<std::size_t>(b - t) : 0;
}

}  // namespace arbor::sched
