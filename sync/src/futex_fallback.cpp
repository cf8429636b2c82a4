// Portable futex word: a fixed table of buckets, each a mutex and a condition variable.
//
// Invariant that prevents lost wakeups: a waiter checks `word == expected` and starts waiting
// while holding its bucket's mutex, and a waker takes the same mutex before notifying. A waker
// stores to the word before calling wake, so either the waiter saw the new value, or it was
// already inside `wait` (which released the mutex atomically) when the notification came.
//
// Several addresses share a bucket, so a wake notifies everyone in the bucket: a notify_one
// could pick a waiter of another address and the intended one would sleep on. The extra
// waiters see a spurious return, which every caller tolerates.
#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "arbor/sync/futex.hpp"

namespace arbor::sync::fallback {
namespace {

struct alignas(64) Bucket {
  std::mutex mutex;
  std::condition_variable cv;
};

Bucket& bucket_for(const void* address) noexcept {
  static std::array<Bucket, 64> buckets;
  auto key = reinterpret_cast<std::uintptr_t>(address);
  key ^= key >> 7;  // words are 4-aligned and often 64-aligned: mix the high bits in
  return buckets[(key >> 2) % buckets.size()];
}

}  // namespace

bool futex_wait(FutexWord& word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout) noexcept {
  Bucket& b = bucket_for(&word);
  std::unique_lock lock(b.mutex);
  if (word.load(std::memory_order_relaxed) != expected) return true;
  if (!timeout) {
    b.cv.wait(lock);
    return true;
  }
  return b.cv.wait_for(lock, *timeout) == std::cv_status::no_timeout;
}

void futex_wake_one(FutexWord& word) noexcept {
  futex_wake_all(word);
}

void futex_wake_all(FutexWord& word) noexcept {
  Bucket& b = bucket_for(&word);
  // Taking the mutex orders this wake after any waiter's check-then-wait (see the invariant).
  std::lock_guard lock(b.mutex);
  b.cv.notify_all();
}

}  // namespace arbor::sync::fallback
