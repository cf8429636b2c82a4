#include "global_batch.hpp"

#include <algorithm>

namespace arbor::sched {

std::size_t global_batch_size(std::size_t queued, std::size_t workers, std::size_t local_capacity,
                              std::size_t local_free) noexcept {
  if (queued == 0) return 0;
  const std::size_t share = queued / std::max<std::size_t>(workers, 1) + 1;
  // The first item is run, not pushed: it needs no slot.
  return std::min({share, std::max<std::size_t>(local_capacity / 2, 1), local_free + 1});
}

WorkItem* pop_global_batch(GlobalQueue& global, LocalQueue& local, std::size_t workers) noexcept {
  // The size is a racy hint (relaxed): a stale value only makes the batch a little larger or
  // smaller. The free slots are exact for the owner or an underestimate (thieves only take).
  const std::size_t used = local.size_estimate();
  const std::size_t free = used < local.capacity() ? local.capacity() - used : 0;
  const std::size_t max = global_batch_size(global.size(), workers, local.capacity(), free);
  std::size_t count = 0;
  WorkItem* first = global.pop_batch(max, count);
  if (count > 1) {
    WorkItem* rest = first->next;
    first->next = nullptr;
    // Cannot fail (count - 1 <= free, and the room only grows while the owner is here); if a
    // change ever broke that, the items would go back to the global queue, late but not lost.
    if (!local.push_batch(rest, count - 1)) {
      WorkItem* last = rest;
      while (last->next != nullptr)
        last = last->next;
      global.push_batch(rest, last, count - 1);
    }
  }
  return first;
}

WorkItem* take_waiting_oldest(LocalQueue& local, std::int64_t& seen) noexcept {
  const std::int64_t oldest = local.size_estimate() != 0 ? local.oldest_position() : -1;
  // The top position only moves when its item leaves: the same position twice means the same
  // item, there all along.
  const bool waited = oldest >= 0 && oldest == seen;
  seen = oldest;
  if (!waited) return nullptr;
  WorkItem* item = local.steal();  // the owner may steal from its own queue (it is any thread)
  // After our steal the next item is the oldest; from now on it must wait its own interval.
  if (item != nullptr) seen = oldest + 1;
  return item;
}

}  // namespace arbor::sched
