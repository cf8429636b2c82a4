#include "arbor/sync/spin.hpp"

#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace arbor::sync {

std::optional<SpinConfig> SpinConfig::parse(std::string_view text) noexcept {
  if (text == "adaptive") return SpinConfig{};
  if (text == "none") return SpinConfig{Mode::none, {}};
  std::int64_t ns = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ns);
  if (ec != std::errc{} || end != text.data() + text.size() || ns < 0 || text.empty())
    return std::nullopt;
  return SpinConfig{Mode::fixed, std::chrono::nanoseconds(ns)};
}

SpinConfig SpinConfig::from_env() {
  const char* value = std::getenv("ARBOR_SPIN");
  if (value == nullptr || *value == '\0') return SpinConfig{};
  if (auto config = parse(value)) return *config;
  throw std::invalid_argument(std::string("ARBOR_SPIN must be 'adaptive', 'none' or a budget in "
                                          "nanoseconds, got '") +
                              value + "'");
}

AdaptiveSpinner::AdaptiveSpinner(SpinConfig config) noexcept : config_(config) {}

std::chrono::nanoseconds AdaptiveSpinner::budget(unsigned busy_threads,
                                                 unsigned cpus) const noexcept {
  switch (config_.mode) {
    case SpinConfig::Mode::none:
      return std::chrono::nanoseconds::zero();
    case SpinConfig::Mode::fixed:
      return config_.fixed_budget;
    case SpinConfig::Mode::adaptive:
      break;
  }
  // Spinning without a core of our own only delays the thread that holds it. One CPU is not that
  // case: a producer the kernel wakes (a blocking-pool thread, an outside submitter) preempts the
  // spinner and hands over before it sleeps, which saves the sleep and the wake-up
  // (perf/blocking_handoff under `taskset -c 0`: 13 µs per hand-off against 18 without the spin).
  if (busy_threads >= cpus) return std::chrono::nanoseconds::zero();
  return adaptive_budget_;
}

void AdaptiveSpinner::record(bool found_work) noexcept {
  if (found_work) {
    adaptive_budget_ = adaptive_budget_ * 2 > kMaxBudget ? kMaxBudget : adaptive_budget_ * 2;
  } else {
    adaptive_budget_ = adaptive_budget_ / 2 < kMinBudget ? kMinBudget : adaptive_budget_ / 2;
  }
}

}  // namespace arbor::sync
