// FramePool: where coroutine frames come from.
//
// Each thread keeps a free list per size class (64-byte steps up to 2 KiB) holding at most
// kCachedPerClass frames; a frame freed on another thread simply joins that thread's cache,
// and anything beyond the bound goes back to the heap, so the cache stays bounded. Frames
// above 2 KiB always use the heap. The pool is switched by ARBOR_POOL_FRAMES=0|1 (read once);
// see docs/benchmarks.md for the measurement behind the default.
#pragma once

#include <cstddef>
#include <cstdint>

namespace arbor::frame_pool {

inline constexpr std::size_t kClassBytes = 64;
inline constexpr std::size_t kMaxPooledBytes = 2048;
inline constexpr std::size_t kCachedPerClass = 64;

void* allocate(std::size_t size);
void deallocate(void* frame, std::size_t size) noexcept;

/// Whether pooling is on (ARBOR_POOL_FRAMES; default on).
bool enabled() noexcept;

/// Frames taken from the heap / returned to it, over all threads (relaxed counters).
std::uint64_t heap_allocations() noexcept;
std::uint64_t heap_frees() noexcept;

}  // namespace arbor::frame_pool
