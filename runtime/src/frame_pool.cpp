#include "arbor/runtime/frame_pool.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "arbor/sync/thread_object.hpp"

namespace arbor::frame_pool {
namespace {

constexpr std::size_t kClasses = kMaxPooledBytes / kClassBytes;

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

struct FreeFrame {
  FreeFrame* next;
};

// One per thread. The destructor returns cached frames to the heap at thread exit.
struct Cache {
  FreeFrame* head[kClasses] = {};
  std::size_t count[kClasses] = {};
  ~Cache() {
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
  return sync::this_thread_object<Cache>();
}

// Class c holds frames of (c + 1) * kClassBytes bytes.
std::size_t class_of(std::size_t size) noexcept {
  return (size + kClassBytes - 1) / kClassBytes - 1;
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
  if (FreeFrame* f = cache->head[c]) {
    cache->head[c] = f->next;
    --cache->count[c];
    return f;
  }
  return heap_allocate((c + 1) * kClassBytes);
}

void deallocate(void* frame, std::size_t size) noexcept {
  if (!enabled() || size > kMaxPooledBytes || size == 0) return heap_free(frame);
  const std::size_t c = class_of(size);
  Cache* cache = this_thread_cache();
  if (cache == nullptr || cache->count[c] >= kCachedPerClass) return heap_free(frame);
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
