#include "arbor/sync/spin.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#if defined(__linux__)
#include <sched.h>
#elif defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#endif

namespace arbor::sync {
namespace {

using namespace std::chrono_literals;

// POSIX has setenv/unsetenv; the Windows CRT has _putenv_s, where an empty value unsets.
void set_env(const char* name, const char* value) {
#if defined(_WIN32)
  ASSERT_EQ(::_putenv_s(name, value), 0);
#else
  ASSERT_EQ(::setenv(name, value, 1), 0);
#endif
}
void unset_env(const char* name) {
#if defined(_WIN32)
  ASSERT_EQ(::_putenv_s(name, ""), 0);
#else
  ASSERT_EQ(::unsetenv(name), 0);
#endif
}

TEST(Backoff, AttemptZeroSpinsZero) {
  EXPECT_EQ(Backoff::spins(0, 0), 0u);
  EXPECT_EQ(Backoff::spins(0, 0xffffffffu), 0u);
}

TEST(Backoff, WalksEveryAttemptWithinBounds) {
  // Runs under UBSan too: a shift by >= 32 at any attempt would be reported there.
  for (std::uint32_t attempt = 0; attempt <= 64; ++attempt) {
    for (std::uint32_t random : {0u, 1u, 0x5555u, 0xffffffffu}) {
      std::uint32_t spins = Backoff::spins(attempt, random);
      if (attempt == 0) {
        EXPECT_EQ(spins, 0u);
        continue;
      }
      std::uint32_t exponent = std::min(attempt, Backoff::kMaxExponent);
      EXPECT_GE(spins, 1u << (exponent - 1)) << attempt;
      EXPECT_LT(spins, 1u << exponent) << attempt;
    }
  }
}

TEST(Backoff, GrowsWithTheAttempt) {
  EXPECT_LT(Backoff::spins(1, 0), Backoff::spins(2, 0));
  EXPECT_LT(Backoff::spins(5, 0), Backoff::spins(9, 0));
  EXPECT_EQ(Backoff::spins(64, 0), Backoff::spins(Backoff::kMaxExponent, 0));
}

TEST(SpinConfig, Parses) {
  EXPECT_EQ(SpinConfig::parse("adaptive")->mode, SpinConfig::Mode::adaptive);
  EXPECT_EQ(SpinConfig::parse("none")->mode, SpinConfig::Mode::none);
  auto fixed = SpinConfig::parse("2500");
  ASSERT_TRUE(fixed);
  EXPECT_EQ(fixed->mode, SpinConfig::Mode::fixed);
  EXPECT_EQ(fixed->fixed_budget, 2500ns);
  for (const char* bad : {"", "fast", "-1", "12us", "1e3", " 5"})
    EXPECT_FALSE(SpinConfig::parse(bad)) << bad;
}

TEST(SpinConfig, BadEnvironmentIsAClearError) {
  set_env("ARBOR_SPIN", "sometimes");
  try {
    (void)SpinConfig::from_env();
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ARBOR_SPIN"), std::string::npos);
  }
  set_env("ARBOR_SPIN", "none");
  EXPECT_EQ(SpinConfig::from_env().mode, SpinConfig::Mode::none);
  unset_env("ARBOR_SPIN");
  EXPECT_EQ(SpinConfig::from_env().mode, SpinConfig::Mode::adaptive);
}

TEST(AdaptiveSpinner, GivesTheCoreBackWhenNothingIsFound) {
  AdaptiveSpinner s;
  for (int i = 0; i < 20; ++i)
    s.record(false);
  EXPECT_EQ(s.budget(0, 4), AdaptiveSpinner::kMinBudget);
}

TEST(AdaptiveSpinner, SpinsLongerWhileSpinsPayOff) {
  AdaptiveSpinner s;
  auto before = s.budget(0, 4);
  s.record(true);
  EXPECT_GT(s.budget(0, 4), before);
  for (int i = 0; i < 20; ++i)
    s.record(true);
  EXPECT_EQ(s.budget(0, 4), AdaptiveSpinner::kMaxBudget);
}

TEST(AdaptiveSpinner, DoesNotSpinWithoutACoreOfItsOwn) {
  AdaptiveSpinner s;
  for (int i = 0; i < 20; ++i)
    s.record(true);
  EXPECT_GT(s.budget(1, 2), 0ns);
  EXPECT_EQ(s.budget(2, 2), 0ns);
  EXPECT_EQ(s.budget(5, 2), 0ns);
}

// One CPU keeps its spin: a producer the kernel wakes preempts the spinner and hands over
// before it sleeps (perf/blocking_handoff; a zero budget there cost 37 % per hand-off).
TEST(AdaptiveSpinner, SpinsOnOneCpu) {
  AdaptiveSpinner s;
  for (int i = 0; i < 20; ++i)
    s.record(false);
  EXPECT_EQ(s.budget(0, 1), AdaptiveSpinner::kMinBudget);
  EXPECT_EQ(s.budget(1, 1), 0ns);  // another running thread holds the only CPU
}

TEST(AdaptiveSpinner, FixedModesIgnoreFeedback) {
  AdaptiveSpinner none(SpinConfig{SpinConfig::Mode::none, {}});
  none.record(true);
  EXPECT_EQ(none.budget(0, 8), 0ns);
  AdaptiveSpinner fixed(SpinConfig{SpinConfig::Mode::fixed, 7us});
  fixed.record(false);
  EXPECT_EQ(fixed.budget(0, 8), 7us);
}

TEST(AvailableCpus, AtLeastOne) {
  EXPECT_GE(available_cpus(), 1u);
}

// The scheduler sizes its pool from this, so a process confined to one CPU must see one.
TEST(AvailableCpus, FollowsTheAffinityMask) {
#if defined(__linux__)
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved))
    ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  unsigned seen = available_cpus();
  ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
#elif defined(_WIN32)
  DWORD_PTR saved = 0;
  DWORD_PTR system = 0;
  ASSERT_TRUE(GetProcessAffinityMask(GetCurrentProcess(), &saved, &system));
  ASSERT_NE(saved, 0u);
  DWORD_PTR one = saved & (~saved + 1);  // lowest set bit
  ASSERT_TRUE(SetProcessAffinityMask(GetCurrentProcess(), one));
  unsigned seen = available_cpus();
  ASSERT_TRUE(SetProcessAffinityMask(GetCurrentProcess(), saved));
#else
  unsigned seen = 1;
  GTEST_SKIP() << "this platform has no affinity masks";
#endif
  EXPECT_EQ(seen, 1u);
}

}  // namespace
}  // namespace arbor::sync
