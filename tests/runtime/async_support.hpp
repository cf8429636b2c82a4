// Helpers for the tests of the async primitives and channels: a task with its own stop source
// (so one waiter can be cancelled), and waiting for a condition without sleeping.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <stop_token>
#include <thread>

#include "arbor/arbor.hpp"

namespace arbor::test {

/// A context whose stop source cancels only the tasks spawned under it.
struct Cancellable {
  explicit Cancellable(Runtime& rt) : context{&rt, source.get_token()} {}
  void cancel() { source.request_stop(); }
  std::stop_source source;
  TaskContext context;
};

/// Polls `condition` (yielding the thread) until it holds; false after `limit`. Used to wait
/// until tasks have parked, in order; it synchronises on the primitive's own state.
template <class F>
bool until(F condition, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

inline bool canceled(std::error_code e) {
  return e == std::make_error_code(std::errc::operation_canceled);
}

}  // namespace arbor::test
