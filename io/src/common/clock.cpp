// The timers' clock (arbor/io/clock.hpp). Two words: `paused_at_`, the value while paused
// (kRunning otherwise), and `offset_`, what was advanced in total, added to steady_clock while
// running. Resume stores the new offset before it clears paused_at_ (release), and now_ns()
// loads paused_at_ first (acquire): a reader that sees the clock running sees the offset that
// goes with it, so the time it reads is never before the paused value.
#include "arbor/io/clock.hpp"

#include <atomic>
#include <chrono>
#include <limits>

namespace arbor::io {
namespace {

constexpr std::int64_t kRunning = std::numeric_limits<std::int64_t>::min();
std::atomic<std::int64_t> paused_at_{kRunning};
std::atomic<std::int64_t> offset_{0};

std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::int64_t now_ns() noexcept {
  const std::int64_t paused = paused_at_.load(std::memory_order_acquire);
  if (paused != kRunning) return paused;
  return steady_ns() + offset_.load(std::memory_order_relaxed);
}

bool clock_paused() noexcept {
  return paused_at_.load(std::memory_order_acquire) != kRunning;
}

bool pause_clock() noexcept {
  std::int64_t expected = kRunning;
  return paused_at_.compare_exchange_strong(expected, now_ns(), std::memory_order_acq_rel);
}

bool resume_clock() noexcept {
  std::int64_t at = paused_at_.load(std::memory_order_acquire);
  if (at == kRunning) return false;
  // Only the pauser resumes (TestClock is one owner), so nothing moves `at` but advances; an
  // advance racing this one is lost, which the owner's ~TestClock makes its own business.
  offset_.store(at - steady_ns(), std::memory_order_relaxed);
  return paused_at_.exchange(kRunning, std::memory_order_acq_rel) != kRunning;
}

bool advance_clock(std::int64_t ns) noexcept {
  std::int64_t at = paused_at_.load(std::memory_order_acquire);
  do {
    if (at == kRunning) return false;
  } while (
      !paused_at_.compare_exchange_weak(at, at + (ns > 0 ? ns : 0), std::memory_order_acq_rel));
  return true;
}

bool advance_clock_to(std::int64_t ns) noexcept {
  std::int64_t at = paused_at_.load(std::memory_order_acquire);
  do {
    if (at == kRunning) return false;
    if (at >= ns) return true;
  } while (!paused_at_.compare_exchange_weak(at, ns, std::memory_order_acq_rel));
  return true;
}

}  // namespace arbor::io
