// FramePool: per-thread caches of coroutine frames, balanced through a bounded depot.
//
// The invariant: every frame the pool holds is in exactly one place, a thread's cache or the
// depot, and both are bounded (kCachedPerClass per class per thread, kDepotBatches batches
// of kBatch per class in the depot), so the pool never holds more than those bounds; all
// else goes back to the heap.
//
// Why a depot: a coroutine that suspends on one worker is often resumed, and its frame freed,
// on another (an IO completion runs where the poller is). Then one thread only allocates and
// another only frees: the first cache runs dry and the second overflows, and without the
// depot every such frame would be a heap allocation. A cache that reaches its bound moves
// half of itself (kBatch frames, one chain) into the depot; a cache that runs dry takes one
// chain back. The depot's lock is taken once per kBatch frames, never per frame.
#include "arbor/runtime/frame_pool.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "arbor/sync/thread_object.hpp"

namespace arbor::frame_pool {
namespace {

constexpr std::size_t kClasses = kMaxPooledBytes / kClassBytes;
constexpr std::size_t kBatch = kCachedPerClass / 2;
static_assert(kBatch > 0 && kDepotFramesPerClass % kBatch == 0);
constexpr std::size_t kDepotBatches = kDepotFramesPerClass / kBatch;

std::atomic<std::uint64_t> heap_allocs{0};
std::atomic<std::uint64_t> heap_releases{0};

bool read_enabled() noexcept {
  const char* v = std::getenv("ARBOR_POOL_FRAMES");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

void* heap_allocate(std::size_t size) {
  heap_allocs.fetch_add(1, std::memory_order_relaxed);
  return ::operator new(size);
}

void heap_free(void* p) noexcept {
  heap_releases.fetch_add(1, std::memory_order_relaxed);
  ::operator delete(p);
}

// A free frame is at least kClassBytes long: room for both links.
struct FreeFrame {
  FreeFrame* next;        // the next frame of the same chain
  FreeFrame* next_chain;  // in the depot: the head of the next chain
};
static_assert(sizeof(FreeFrame) <= kClassBytes);

// Chains of exactly kBatch frames per class, at most kDepotBatches of them.
class Depot {
 public:
  // Takes `chain` (kBatch frames); false if the class is full (the caller keeps the chain).
  bool put(std::size_t c, FreeFrame* chain) noexcept {
    std::lock_guard guard(lock_);
    if (full(c)) return false;
    chain->next_chain = head_[c];
    head_[c] = chain;
    chains_[c].store(chains_[c].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return true;
  }
  // A hint, read without the lock: a full cache whose depot class is full frees to the heap
  // without walking a chain or taking the lock for each frame.
  bool full(std::size_t c) const noexcept {
    return chains_[c].load(std::memory_order_relaxed) == kDepotBatches;
  }
  // A chain of kBatch frames, or null if the class has none.
  FreeFrame* take(std::size_t c) noexcept {
    std::lock_guard guard(lock_);
    FreeFrame* chain = head_[c];
    if (chain == nullptr) return nullptr;
    head_[c] = chain->next_chain;
    chains_[c].store(chains_[c].load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    return chain;
  }

 private:
  std::mutex lock_;
  FreeFrame* head_[kClasses] = {};
  std::atomic<std::size_t> chains_[kClasses] = {};  // written under lock_
};

// Never destroyed: threads may free frames into it while static destructors run. What it
// holds at exit is reclaimed with the process.
Depot& depot() noexcept {
  static Depot* d = new Depot;
  return *d;
}

// Set once the calling thread's cache has been destroyed: a frame freed or made later in the
// thread's teardown (another thread_local's destructor; on the main thread, a static
// destructor, as exit() destroys thread_locals first) uses the heap, not a cache that no longer
// exists. Trivially destructible, so it outlives every destructor
// (FramePool.AFrameFreedAfterTheThreadsCacheIsGoneGoesToTheHeap).
constinit thread_local bool t_cache_gone = false;

// One per thread. The destructor returns cached frames to the heap at thread exit.
struct Cache {
  FreeFrame* head[kClasses] = {};
  std::size_t count[kClasses] = {};
  ~Cache() {
    t_cache_gone = true;
    for (std::size_t c = 0; c < kClasses; ++c)
      while (head[c] != nullptr) {
        FreeFrame* f = head[c];
        head[c] = f->next;
        heap_free(f);
      }
  }
};

// The calling thread's cache; null if none can be had (its frames then use the heap). Not a
// plain thread_local: see sync/thread_object.hpp for why, on Windows.
Cache* this_thread_cache() noexcept {
  if (t_cache_gone) return nullptr;
  return sync::this_thread_object<Cache>();
}

// Class c holds frames of (c + 1) * kClassBytes bytes.
std::size_t class_of(std::size_t size) noexcept {
  return (size + kClassBytes - 1) / kClassBytes - 1;
}

// Moves the first kBatch frames of a full cache's class c into the depot, or keeps them if the
// depot's class is full (the frame being freed then goes to the heap).
void spill(Cache& cache, std::size_t c) noexcept {
  if (depot().full(c)) return;
  FreeFrame* chain = cache.head[c];
  FreeFrame* last = chain;
  for (std::size_t i = 1; i < kBatch; ++i)
    last = last->next;
  FreeFrame* rest = last->next;
  last->next = nullptr;
  if (!depot().put(c, chain)) {
    last->next = rest;
    return;
  }
  cache.head[c] = rest;
  cache.count[c] -= kBatch;
}

}  // namespace

bool enabled() noexcept {
  static const bool on = read_enabled();
  return on;
}

void* allocate(std::size_t size) {
  if (!enabled() || size > kMaxPooledBytes || size == 0) return heap_allocate(size);
  const std::size_t c = class_of(size);
  Cache* cache = this_thread_cache();
  if (cache == nullptr) return heap_allocate((c + 1) * kClassBytes);
  if (cache->head[c] == nullptr) {
    cache->head[c] = depot().take(c);
    if (cache->head[c] == nullptr) return heap_allocate((c + 1) * kClassBytes);
    cache->count[c] = kBatch;
  }
  FreeFrame* f = cache->head[c];
  cache->head[c] = f->next;
  --cache->count[c];
  return f;
}

void deallocate(void* frame, std::size_t size) noexcept {
  if (!enabled() || size > kMaxPooledBytes || size == 0) return heap_free(frame);
  const std::size_t c = class_of(size);
  Cache* cache = this_thread_cache();
  if (cache == nullptr) return heap_free(frame);
  if (cache->count[c] >= kCachedPerClass) {
    spill(*cache, c);
    if (cache->count[c] >= kCachedPerClass) return heap_free(frame);
  }
  auto* f = static_cast<FreeFrame*>(frame);
  f->next = cache->head[c];
  cache->head[c] = f;
  ++cache->count[c];
}

std::uint64_t heap_allocations() noexcept {
  return heap_allocs.load(std::memory_order_relaxed);
}
std::uint64_t heap_frees() noexcept {
  return heap_releases.load(std::memory_order_relaxed);
}

}  // namespace arbor::frame_pool
