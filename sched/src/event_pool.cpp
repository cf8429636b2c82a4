#include "arbor/sched/event_pool.hpp"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <string>

#include "arbor/sync/spin.hpp"
#include "event_item.hpp"
#include "event_pool_claims.hpp"
#include "event_pool_state.hpp"

namespace arbor::sched {
namespace {

// Ids start at 1 (0 marks an unused claim) and are never reused, so a claim can never match a
// pool that merely took a dead pool's address.
std::atomic<std::uint64_t> next_pool_id{1};

std::size_t checked_caches(std::size_t capacity, EventPoolCaches shape) {
  if (shape.caches == 0 || shape.cache_items == 0) return 0;
  if (shape.caches > EventPool::kMaxCaches)
    throw std::invalid_argument("arbor::sched::EventPool: at most " +
                                std::to_string(EventPool::kMaxCaches) + " caches, got " +
                                std::to_string(shape.caches));
  if (shape.cache_items > capacity / shape.caches)
    throw std::invalid_argument(
        "arbor::sched::EventPool: the caches (" + std::to_string(shape.caches) + " x " +
        std::to_string(shape.cache_items) + ") exceed the capacity " + std::to_string(capacity));
  return shape.caches;
}

// Links items[0..n) in order through `next`, so that the shared list can take a prefix of them
// in O(1) under its lock.
void link(EventItem* const* items, std::size_t n) noexcept {
  for (std::size_t i = 0; i + 1 < n; ++i)
    items[i]->next = items[i + 1];
}

}  // namespace

EventPoolCaches EventPoolCaches::for_capacity(std::size_t capacity) noexcept {
  const std::size_t caches =
      std::min<std::size_t>(EventPool::kMaxCaches, 2 * std::max(1u, sync::available_cpus()));
  const std::size_t items = std::min<std::size_t>(32, capacity / (2 * caches));
  // Below 8 a cache would still take the lock every 4 releases: not worth the stranded items.
  if (items < 8) return {};
  return {caches, items};
}

// --- State ---------------------------------------------------------------------------------

EventPool::State::State(std::size_t capacity, EventPoolCaches shape)
    : id(next_pool_id.fetch_add(1, std::memory_order_relaxed)),
      shared_bound(capacity - shape.caches * shape.cache_items),
      cache_count(shape.caches),
      cache_items(shape.cache_items) {
  if (cache_count == 0) return;
  caches = std::make_unique<Cache[]>(cache_count);
  slots = std::make_unique<EventItem*[]>(cache_count * cache_items);
  for (std::size_t i = 0; i < cache_count; ++i)
    caches[i].items = &slots[i * cache_items];
}

EventPool::State::~State() {
  for (WorkItem* item = free; item != nullptr;) {
    WorkItem* next = item->next;
    delete static_cast<EventItem*>(item);
    item = next;
  }
  // Caches still claimed by live threads included: those threads no longer use this pool, and
  // their claims expire with this state (they never dereference a cache of a dead pool).
  for (std::size_t i = 0; i < cache_count; ++i) {
    Cache& cache = caches[i];
    const std::size_t n = cache.count.load(std::memory_order_relaxed);
    for (std::size_t j = 0; j < n; ++j)
      delete cache.items[j];
  }
}

std::size_t EventPool::State::take_shared_locked(EventItem** out, std::size_t n) noexcept {
  std::size_t got = 0;
  while (got < n && free != nullptr) {
    out[got++] = static_cast<EventItem*>(free);
    free = free->next;
  }
  // Release: pairs with idle()'s acquire load (see event_pool_state.hpp).
  if (got != 0)
    shared_idle.store(shared_idle.load(std::memory_order_relaxed) - got, std::memory_order_release);
  return got;
}

std::size_t EventPool::State::put_shared_locked(EventItem** items, std::size_t n) noexcept {
  const std::size_t idle = shared_idle.load(std::memory_order_relaxed);
  const std::size_t keep = std::min(n, shared_bound - idle);
  if (keep == 0) return 0;
  items[keep - 1]->next = free;
  free = items[0];
  shared_idle.store(idle + keep, std::memory_order_release);
  return keep;
}

void EventPool::State::free_items(EventItem* const* items, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    delete items[i];
  freed.fetch_add(n, std::memory_order_relaxed);
}

void EventPool::State::flush_and_unclaim(Cache& cache) noexcept {
  const std::size_t n = cache.count.load(std::memory_order_relaxed);
  if (n != 0) {
    link(cache.items, n);
    cache.count.store(0, std::memory_order_relaxed);  // leaves the cache before the shared list
    std::size_t kept = 0;
    {
      std::lock_guard lock(mutex);
      trips.store(trips.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      kept = put_shared_locked(cache.items, n);
    }
    free_items(cache.items + kept, n - kept);
  }
  // Release: the next thread to claim this cache (acquire exchange) finds it empty.
  cache.claimed.store(false, std::memory_order_release);
}

// --- EventPool -----------------------------------------------------------------------------

EventPool::EventPool(std::size_t capacity)
    : EventPool(capacity, EventPoolCaches::for_capacity(capacity)) {}

EventPool::EventPool(std::size_t capacity, EventPoolCaches shape)
    : capacity_(capacity),
      caches_(checked_caches(capacity, shape)),
      cache_items_(caches_ == 0 ? 0 : shape.cache_items),
      // Not make_shared: the state's memory goes with the last strong reference, not with the
      // last of the threads' weak ones.
      state_(new State(capacity, EventPoolCaches{caches_, cache_items_})),
      id_(state_->id) {}

EventPool::~EventPool() = default;  // the state frees everything once nobody flushes into it

std::size_t EventPool::idle() const noexcept {
  // The shared counter first, with acquire: a spill lowers its cache's counter before it raises
  // the shared one with release, so the cache loads below cannot count a spilled item again.
  const std::size_t shared = state_->shared_idle.load(std::memory_order_acquire);
  return shared + cached();
}

std::size_t EventPool::cached() const noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < caches_; ++i)
    n += state_->caches[i].count.load(std::memory_order_relaxed);
  return n;
}

std::uint64_t EventPool::allocated() const noexcept {
  return state_->allocated.load(std::memory_order_relaxed);
}
std::uint64_t EventPool::freed() const noexcept {
  return state_->freed.load(std::memory_order_relaxed);
}
std::uint64_t EventPool::shared_trips() const noexcept {
  return state_->trips.load(std::memory_order_relaxed);
}

EventPool::Cache* EventPool::own_cache() const noexcept {
  detail::PoolClaim* claim = detail::find_pool_claim(id_);
  return claim != nullptr ? claim->cache : nullptr;
}

EventPool::Cache* EventPool::claim_cache() noexcept {
  State& s = *state_;
  for (std::size_t i = 0; i < caches_; ++i) {
    Cache& cache = s.caches[i];
    // Acquire: pairs with the release that freed the cache (flush_and_unclaim).
    if (cache.claimed.load(std::memory_order_relaxed) ||
        cache.claimed.exchange(true, std::memory_order_acquire))
      continue;
    if (detail::record_pool_claim(state_, &cache)) return &cache;
    cache.claimed.store(false, std::memory_order_release);  // nowhere to remember it: give back
    return nullptr;
  }
  // None free: remember that, so that later releases go straight to the shared list instead of
  // scanning the caches each time.
  detail::record_pool_claim(state_, nullptr);
  return nullptr;
}

std::size_t EventPool::spill(Cache& cache, std::size_t count) noexcept {
  State& s = *state_;
  // The newest half: released last, by this thread, so linking them touches warm lines. The
  // older half stays, so a thread that releases and acquires in turn never spills and refills
  // on alternate calls.
  const std::size_t k = count - count / 2;
  EventItem** moving = cache.items + (count - k);
  link(moving, k);
  cache.count.store(count - k, std::memory_order_relaxed);  // before the shared list (idle())
  std::size_t kept = 0;
  {
    std::lock_guard lock(s.mutex);
    s.trips.store(s.trips.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    kept = s.put_shared_locked(moving, k);
  }
  s.free_items(moving + kept, k - kept);
  return count - k;
}

EventItem* EventPool::acquire() {
  EventItem* item = nullptr;
  acquire(&item, 1);
  return item;
}

void EventPool::acquire(EventItem** out, std::size_t n) {
  State& s = *state_;
  std::size_t got = 0;
  // Acquiring claims no cache: a thread that only acquires (a poller) would only strand items
  // in one. A thread that has one (it released items before) takes the newest first.
  Cache* cache = caches_ != 0 ? own_cache() : nullptr;
  if (cache != nullptr) {
    std::size_t c = cache->count.load(std::memory_order_relaxed);
    while (got < n && c != 0)
      out[got++] = cache->items[--c];
    cache->count.store(c, std::memory_order_relaxed);
  }
  if (got < n) {
    std::lock_guard lock(s.mutex);
    s.trips.store(s.trips.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    got += s.take_shared_locked(out + got, n - got);
    if (cache != nullptr && got == n) {
      // The cache ran dry (got < n above) and the shared list still had enough: refill it to
      // half full in the same lock, so the next cache_items() / 2 acquires take none.
      cache->count.store(s.take_shared_locked(cache->items, cache_items_ / 2),
                         std::memory_order_relaxed);
    }
  }
  try {
    for (; got < n; ++got) {
      out[got] = new EventItem();
      s.allocated.fetch_add(1, std::memory_order_relaxed);
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
  if (caches_ != 0) {
    detail::PoolClaim* claim = detail::find_pool_claim(id_);
    Cache* cache = claim != nullptr ? claim->cache : claim_cache();
    if (cache != nullptr) {
      // No lock: only this thread touches the cache; idle() reads the counter.
      std::size_t count = cache->count.load(std::memory_order_relaxed);
      if (count == cache_items_) count = spill(*cache, count);
      cache->items[count] = item;
      cache->count.store(count + 1, std::memory_order_relaxed);
      return;
    }
  }
  State& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    s.trips.store(s.trips.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    const std::size_t idle = s.shared_idle.load(std::memory_order_relaxed);
    if (idle < s.shared_bound) {
      item->next = s.free;
      s.free = item;
      s.shared_idle.store(idle + 1, std::memory_order_release);
      return;
    }
  }
  delete item;
  s.freed.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace arbor::sched
