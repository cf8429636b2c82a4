// The futex word, for the native backend and for the portable fallback alike.
#include "arbor/sync/futex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace arbor::sync {
namespace {

using namespace std::chrono_literals;

struct Backend {
  const char* name;
  bool (*wait)(FutexWord&, std::uint32_t, std::optional<std::chrono::nanoseconds>) noexcept;
  void (*wake_one)(FutexWord&) noexcept;
  void (*wake_all)(FutexWord&) noexcept;
};

class FutexTest : public ::testing::TestWithParam<Backend> {};

TEST_P(FutexTest, ReturnsAtOnceWhenTheValueDiffers) {
  FutexWord word{7};
  // Untimed: if the mismatch were ignored this would block forever and the test would time out.
  EXPECT_TRUE(GetParam().wait(word, 3, std::nullopt));
}

TEST_P(FutexTest, TimesOutNotBeforeTheTimeout) {
  FutexWord word{0};
  bool timed_out = false;
  for (int attempt = 0; attempt < 100 && !timed_out; ++attempt) {  // tolerate spurious returns
    auto start = std::chrono::steady_clock::now();
    timed_out = !GetParam().wait(word, 0, 2ms);
    if (timed_out) {
      EXPECT_GE(std::chrono::steady_clock::now() - start, 2ms);
    }
  }
  EXPECT_TRUE(timed_out);
}

TEST_P(FutexTest, WakeOneReleasesAWaiter) {
  FutexWord word{0};
  std::thread waiter([&] {
    while (word.load(std::memory_order_acquire) == 0)
      GetParam().wait(word, 0, std::nullopt);
  });
  word.store(1, std::memory_order_release);
  GetParam().wake_one(word);
  waiter.join();  // a lost wake would hang here
  EXPECT_EQ(word.load(), 1u);
}

TEST_P(FutexTest, WakeAllReleasesEveryWaiter) {
  FutexWord word{0};
  std::atomic<int> done{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i)
    waiters.emplace_back([&] {
      while (word.load(std::memory_order_acquire) == 0)
        GetParam().wait(word, 0, std::nullopt);
      done.fetch_add(1);
    });
  word.store(1, std::memory_order_release);
  GetParam().wake_all(word);
  for (auto& t : waiters)
    t.join();
  EXPECT_EQ(done.load(), 4);
}

TEST_P(FutexTest, PingPongManyRounds) {
  // Two threads alternate on one word 10,000 times; any lost wake deadlocks (test timeout).
  FutexWord word{0};
  constexpr std::uint32_t kRounds = 10'000;
  std::thread other([&] {
    for (std::uint32_t i = 1; i < 2 * kRounds; i += 2) {
      std::uint32_t v;
      while ((v = word.load(std::memory_order_acquire)) != i)
        GetParam().wait(word, v, std::nullopt);
      word.store(i + 1, std::memory_order_release);
      GetParam().wake_one(word);
    }
  });
  for (std::uint32_t i = 0; i < 2 * kRounds; i += 2) {
    std::uint32_t v;
    while ((v = word.load(std::memory_order_acquire)) != i)
      GetParam().wait(word, v, std::nullopt);
    word.store(i + 1, std::memory_order_release);
    GetParam().wake_one(word);
  }
  other.join();
  EXPECT_EQ(word.load(), 2 * kRounds);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, FutexTest,
    ::testing::Values(Backend{"native", &futex_wait, &futex_wake_one, &futex_wake_all},
                      Backend{"fallback", &fallback::futex_wait, &fallback::futex_wake_one,
                              &fallback::futex_wake_all}),
    [](const ::testing::TestParamInfo<Backend>& param) { return std::string(param.param.name); });

TEST(FutexBackend, HasAName) {
  EXPECT_STRNE(futex_backend(), "");
}

}  // namespace
}  // namespace arbor::sync
