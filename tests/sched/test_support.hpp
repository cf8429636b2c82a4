// Small helpers shared by the scheduler tests.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include "arbor/sched/work_item.hpp"
#include "arbor/sync/futex.hpp"

namespace arbor::sched::test {

/// A countdown the test thread can block on (futex-based, no sleeping).
class Countdown {
 public:
  explicit Countdown(std::uint32_t n) : left_(n) {}
  void count_down() {
    if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) sync::futex_wake_all(left_);
  }
  /// True once the count reached zero; false if `timeout` passed first.
  bool wait(std::chrono::seconds timeout = std::chrono::seconds(60)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (std::uint32_t v; (v = left_.load(std::memory_order_acquire)) != 0;) {
      auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds::zero()) return false;
      sync::futex_wait(left_, v, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
    }
    return true;
  }
  std::uint32_t left() const { return left_.load(); }

 private:
  sync::FutexWord left_;
};

/// Waits up to `limit` for `c` to reach zero. A hang cannot be cleaned up (its threads hold the
/// objects under test), so on timeout the process ends with a message naming `what` instead of
/// stalling the suite until ctest's timeout.
inline void wait_or_exit(Countdown& c, const char* what,
                         std::chrono::seconds limit = std::chrono::seconds(20)) {
  if (c.wait(limit)) return;
  std::fprintf(stderr, "FAILED: %s did not finish within %lld s (hang or deadlock)\n", what,
               static_cast<long long>(limit.count()));
  std::fflush(stderr);
  std::_Exit(1);
}

/// Polls `condition` (yielding) until it holds or `timeout` passes.
inline bool eventually(const std::function<bool()>& condition,
                       std::chrono::seconds timeout = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

/// A work item that runs a std::function (tests only: it allocates).
struct FnItem : WorkItem {
  explicit FnItem(std::function<void(Disposition)> f) : WorkItem(&invoke), body(std::move(f)) {}
  static void invoke(WorkItem* self, Disposition d) noexcept {
    static_cast<FnItem*>(self)->body(d);
  }
  std::function<void(Disposition)> body;
};

}  // namespace arbor::sched::test
