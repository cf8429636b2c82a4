// The timers' clock (arbor/io/clock.hpp). Three words: `paused_at_`, the value while paused
// (kRunning while running, kPausing while a pause is being taken), `offset_`, what was
// advanced in total, added to steady_clock while running, and `pauses_`, how many pauses began.
//
// Never backwards, with readers racing both edges:
//  - Resume stores the new offset before it clears paused_at_ (release), and now_ns() loads
//    paused_at_ first (acquire): a reader that sees the clock running sees the offset that goes
//    with it, so the time it reads is never before the paused value. Resume clears the value
//    it computed the offset from (a CAS), so a jump by an engine landing in between is kept.
//  - Pause first marks paused_at_ kPausing, then counts the pause, then reads steady_clock for
//    the paused value. A running reader reads steady_clock between two loads of pauses_ (a
//    seq_cst fence before the second) and keeps its time only if no pause began in between:
//    so the pause read steady_clock after it, and the paused value is not before what it
//    returns. Taking the paused value before the CAS, as this did at first, let a reader
//    between the two see a later time than the paused one (TestClockApi.
//    NeverBackwardsWhileReadersRacePauseAndResume). Readers that see kPausing wait for it to end.
#include "arbor/io/clock.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <thread>

namespace arbor::io {
namespace {

constexpr std::int64_t kRunning = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kPausing = kRunning + 1;
constexpr std::int64_t kLowest = kRunning + 2;  // the lowest value the clock can show
std::atomic<std::int64_t> paused_at_{kRunning};
std::atomic<std::int64_t> offset_{0};
std::atomic<std::uint64_t> pauses_{0};

std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// a + b, held at the ends of the range instead of wrapping (a clock advanced or jumped close to
// the end of time stays there: TestClockApi.AnAdvancePastTheEndOfTimeIsRefusedAndTheClockStays).
// (Portable: no compiler builtin, so MSVC builds it too. kLowest - b cannot overflow for b < 0.)
std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  constexpr std::int64_t kHighest = std::numeric_limits<std::int64_t>::max();
  if (b > 0 && a > kHighest - b) return kHighest;
  if (b < 0 && a < kLowest - b) return kLowest;
  const std::int64_t sum = a + b;
  return sum < kLowest ? kLowest : sum;
}

// paused_at_, once no pause is half taken.
std::int64_t settled(std::int64_t at) noexcept {
  while (at == kPausing) {
    std::this_thread::yield();
    at = paused_at_.load(std::memory_order_acquire);
  }
  return at;
}

}  // namespace

std::int64_t now_ns() noexcept {
  for (;;) {
    const std::uint64_t pauses = pauses_.load(std::memory_order_acquire);
    const std::int64_t paused = settled(paused_at_.load(std::memory_order_acquire));
    if (paused != kRunning) return paused;
    const std::int64_t t = saturating_add(steady_ns(), offset_.load(std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (pauses_.load(std::memory_order_relaxed) == pauses) return t;
  }
}

bool clock_paused() noexcept {
  return paused_at_.load(std::memory_order_acquire) != kRunning;
}

bool pause_clock() noexcept {
  std::int64_t expected = kRunning;
  if (!paused_at_.compare_exchange_strong(expected, kPausing, std::memory_order_acq_rel))
    return false;
  pauses_.fetch_add(1, std::memory_order_seq_cst);
  paused_at_.store(saturating_add(steady_ns(), offset_.load(std::memory_order_relaxed)),
                   std::memory_order_release);
  return true;
}

bool resume_clock() noexcept {
  // Only the pauser resumes (TestClock is one owner), but an engine may jump the clock
  // (advance_clock_to) at any time: resume from the value it clears, never from an older one,
  // or a jump landing between the two steps is undone and the clock goes back (timers that
  // fired at the jumped-to time would stand in the future again:
  // TestClockApi.AJumpRacingTheResumeIsNotUndone). A reader that reads offset_ while paused
  // began before the pause and retries, so a retry here may overwrite it.
  std::int64_t at = settled(paused_at_.load(std::memory_order_acquire));
  do {
    if (at == kRunning) return false;
    offset_.store(saturating_add(at, -steady_ns()), std::memory_order_relaxed);
  } while (!paused_at_.compare_exchange_weak(at, kRunning, std::memory_order_acq_rel,
                                             std::memory_order_acquire));
  return true;
}

bool advance_clock(std::int64_t ns) noexcept {
  std::int64_t at = settled(paused_at_.load(std::memory_order_acquire));
  do {
    at = settled(at);
    if (at == kRunning) return false;
  } while (!paused_at_.compare_exchange_weak(at, saturating_add(at, ns > 0 ? ns : 0),
                                             std::memory_order_acq_rel));
  return true;
}

bool advance_clock_to(std::int64_t ns) noexcept {
  std::int64_t at = settled(paused_at_.load(std::memory_order_acquire));
  do {
    at = settled(at);
    if (at == kRunning) return false;
    if (at >= ns) return true;
  } while (!paused_at_.compare_exchange_weak(at, ns, std::memory_order_acq_rel));
  return true;
}

}  // namespace arbor::io
