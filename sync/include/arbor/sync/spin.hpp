// Spinning before parking: how long, and how to pause between probes.
//
// A park/wake round trip costs tens of microseconds on a virtualised machine, a hand-off to a
// spinning thread about a hundred nanoseconds; so spinning pays when work is about to arrive
// and wastes a core when it is not. No fixed count suits both a ping-pong hand-off and a server
// whose pollers need the cores, hence `AdaptiveSpinner`:
//   * the budget is a time, not an iteration count (pause latency varies 10x across CPUs);
//   * it doubles after a spin that found work and halves after one that did not, between
//     kMinBudget and kMaxBudget, so an idle thread gives its core back within a few spins;
//   * it is zero when the spinner would not have a core of its own: when threads that are
//     running or spinning already fill the CPUs this process may use.
// `ARBOR_SPIN=adaptive|none|<nanoseconds>` replaces the policy for experiments.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64) || defined(_M_IX86)
#include <immintrin.h>
#endif

namespace arbor::sync {

/// One polite busy-wait step: tells the CPU we are spinning (x86 `pause`, Arm `yield`).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64) || defined(_M_IX86)
  _mm_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#endif
}

/// Number of CPUs this process may run on (affinity mask), at least 1.
unsigned available_cpus() noexcept;

/// How a thread spins before it parks.
struct SpinConfig {
  enum class Mode { adaptive, none, fixed };
  Mode mode = Mode::adaptive;
  std::chrono::nanoseconds fixed_budget{0};  // Mode::fixed only

  /// Parses "adaptive", "none" or a budget in nanoseconds ("20000"); nullopt if invalid.
  static std::optional<SpinConfig> parse(std::string_view text) noexcept;
  /// Reads ARBOR_SPIN; unset means adaptive. Throws std::invalid_argument on a bad value.
  static SpinConfig from_env();
};

/// Per-thread spin budget. Not thread-safe: each spinning thread owns one.
class AdaptiveSpinner {
 public:
  static constexpr std::chrono::nanoseconds kMinBudget{1'000};
  static constexpr std::chrono::nanoseconds kMaxBudget{50'000};

  explicit AdaptiveSpinner(SpinConfig config = {}) noexcept;

  /// The budget for the next spin, given how many threads of the pool are busy (running or
  /// spinning, this one excluded) and how many CPUs there are.
  std::chrono::nanoseconds budget(unsigned busy_threads, unsigned cpus) const noexcept;
  /// Feeds back whether the last spin found work.
  void record(bool found_work) noexcept;

 private:
  SpinConfig config_;
  std::chrono::nanoseconds adaptive_budget_{kMinBudget * 4};
};

/// Exponential backoff with jitter for contended retries. Attempt 0 waits zero; attempt a >= 1
/// waits in [2^(a-1), 2^a) pause steps, the exponent capped at kMaxExponent, so no shift ever
/// reaches the word width whatever `attempt` is.
struct Backoff {
  static constexpr std::uint32_t kMaxExponent = 10;

  static constexpr std::uint32_t spins(std::uint32_t attempt, std::uint32_t random) noexcept {
    if (attempt == 0) return 0;
    std::uint32_t exponent = attempt < kMaxExponent ? attempt : kMaxExponent;
    std::uint32_t base = std::uint32_t{1} << (exponent - 1);
    return base + (random & (base - 1));
  }
  static void pause(std::uint32_t attempt, std::uint32_t random) noexcept {
    for (std::uint32_t i = spins(attempt, random); i > 0; --i)
      cpu_relax();
  }
};

/// xorshift32: a tiny per-thread random source for jitter and victim selection.
class FastRandom {
 public:
  explicit FastRandom(std::uint32_t seed) noexcept : state_(seed == 0 ? 0x9e3779b9u : seed) {}
  std::uint32_t next() noexcept {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return state_;
  }
  /// Uniform-enough value in [0, n) for small n (Lemire's multiply-shift).
  std::uint32_t below(std::uint32_t n) noexcept {
    return static_cast<std::uint32_t>((std::uint64_t{next()} * n) >> 32);
  }

 private:
  std::uint32_t state_;
};

}  // namespace arbor::sync
