// ContextState: what a Context's executors and queued handlers point at, counted.
//
// Invariant: refs = outstanding work (queued handlers + tracked executors) + 1 while the
// Context lives. The state goes when refs reaches 0, so a handler still queued in the runtime
// after its Context is gone finds `closed()` and is destroyed without being called, instead of
// touching freed memory. Every transition that may reach "idle" (refs 1) or "gone" (0) happens
// under the mutex: a wait_idle() cannot miss it, and the state is never deleted under a thread
// that is still notifying.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "arbor/runtime/runtime.hpp"

namespace arbor::asio::detail {

class ContextState {
 public:
  explicit ContextState(Runtime& runtime) noexcept : runtime_(&runtime) {}
  ContextState(const ContextState&) = delete;
  ContextState& operator=(const ContextState&) = delete;

  Runtime& runtime() const noexcept { return *runtime_; }
  bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

  /// One more unit of outstanding work (a queued handler, a tracked executor).
  void work_started() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  /// One unit fewer; may delete the state (Context gone and this was the last).
  void work_finished() noexcept {
    auto current = refs_.load(std::memory_order_relaxed);
    while (current > 2)  // far from idle: no lock
      if (refs_.compare_exchange_weak(current, current - 1, std::memory_order_acq_rel)) return;
    std::unique_lock lock(mutex_);
    const auto previous = refs_.fetch_sub(1, std::memory_order_acq_rel);
    if (previous == 1) {  // the Context had let go: nobody waits any more
      lock.unlock();
      delete this;
      return;
    }
    if (previous == 2) idle_.notify_all();
  }
  /// Outstanding work now (racy unless the caller knows better).
  std::int64_t outstanding() const noexcept {
    const auto r = refs_.load(std::memory_order_acquire);
    return closed() ? r : r - 1;
  }
  /// Blocks until no work is outstanding.
  void wait_idle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return refs_.load(std::memory_order_acquire) == 1; });
  }
  /// The Context's own reference, given up by its destructor.
  void close() noexcept {
    closed_.store(true, std::memory_order_release);
    work_finished();
  }

 private:
  ~ContextState() = default;

  Runtime* runtime_;
  std::atomic<std::int64_t> refs_{1};
  std::atomic<bool> closed_{false};
  std::mutex mutex_;
  std::condition_variable idle_;
};

}  // namespace arbor::asio::detail
