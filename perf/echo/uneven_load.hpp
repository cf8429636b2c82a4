// UnevenLoad: the uneven request of perf/compare-ring-shapes' "busy" load, shared by the echo
// servers it compares (arbor's, Asio's, the ring-shape prototypes), so that each burns the same
// way: every 100th message a thread handles burns `busy_us` µs of CPU before its reply.
#pragma once

#include <chrono>

namespace arbor::perf {

class UnevenLoad {
 public:
  explicit UnevenLoad(int busy_us) noexcept : busy_us_(busy_us) {}

  /// Call once per message, on the thread that handles it; a count per thread.
  void on_message() const noexcept {
    thread_local unsigned count = 0;
    if (busy_us_ <= 0 || ++count % 100 != 0) return;
    const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(busy_us_);
    while (std::chrono::steady_clock::now() < end) {
    }
  }

 private:
  int busy_us_;
};

}  // namespace arbor::perf
