// FramePool: where coroutine frames come from.
//
// Each thread keeps a free list per size class (64-byte steps up to 2 KiB) holding at most
// kCachedPerClass frames. A frame freed on another thread joins that thread's cache; a full
// cache moves half of a class into a shared depot (at most kDepotFramesPerClass frames per
// class), and an empty one takes a batch back, so frames made on one worker and freed on
// another are reused rather than taken from the heap. Beyond both bounds frames go back to
// the heap. Frames above 2 KiB always use the heap. The pool is switched by ARBOR_POOL_FRAMES=0|1
// (read once); see docs/benchmarks.md for the measurement behind the default.
#pragma once

#include <cstddef>
#include <cstdint>

namespace arbor::frame_pool {

inline constexpr std::size_t kClassBytes = 64;
inline constexpr std::size_t kMaxPooledBytes = 2048;
inline constexpr std::size_t kCachedPerClass = 64;
inline constexpr std::size_t kDepotFramesPerClass = 256;

void* allocate(std::size_t size);
void deallocate(void* frame, std::size_t size) noexcept;

/// Whether pooling is on (ARBOR_POOL_FRAMES; default on).
bool enabled() noexcept;

/// Frames taken from the heap / returned to it, over all threads (relaxed counters).
std::uint64_t heap_allocations() noexcept;
std::uint64_t heap_frees() noexcept;

}  // namespace arbor::frame_pool
