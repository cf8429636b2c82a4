// Timer tests check guarantees, never exact durations: a sleep does not end before its
// deadline, earlier deadlines fire first, cancellation is prompt relative to a far deadline.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "../sched/test_support.hpp"
#include "arbor/arbor.hpp"
#include "runtime_support.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;

class TimerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TimerTest, SleepNeverEndsBeforeItsDeadline) {
  auto rt = test::make_runtime(GetParam());
  auto body = []() -> Task<bool> {
    for (auto d : {0ms, 1ms, 2ms, 5ms, 10ms}) {
      const auto start = Clock::now();
      auto r = co_await sleep_for(d);
      if (!r || Clock::now() - start < d) co_return false;
    }
    co_return true;
  };
  EXPECT_TRUE(rt->block_on(body()));
}

// Timers that expire in the same poller wait travel in one batch, and two workers may run that
// batch's handlers in either order; the contract is the engine's: deadlines leave the queue in
// order and each batch is delivered in that order. Inline completions run the handlers on the
// poller in delivery order, so this checks that contract whatever the machine's load.
TEST_P(TimerTest, EarlierDeadlinesFireFirst) {
  RuntimeOptions options;
  options.engine = test::engine_options(GetParam());
  options.engine.inline_completions = true;
  options.scheduler.workers = 2;
  auto created = Runtime::create(options);
  ASSERT_TRUE(created) << created.error().message();
  auto& rt = *created;
  std::mutex m;
  std::vector<int> order;
  auto sleeper = [](std::mutex& mu, std::vector<int>& o, Clock::time_point at,
                    int k) -> Task<void> {
    (void)co_await sleep_until(at);
    std::lock_guard g(mu);
    o.push_back(k);
  };
  auto body = [&]() -> Task<void> {
    const auto base = Clock::now() + 20ms;
    std::vector<Task<void>> tasks;
    // Deadlines 10 ms apart, queued in reverse order.
    for (int k = 9; k >= 0; --k)
      tasks.push_back(sleeper(m, order, base + k * 10ms, k));
    co_await when_all(std::move(tasks));
  };
  rt->block_on(body());
  ASSERT_EQ(order.size(), 10u);
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
}

TEST_P(TimerTest, HundredThousandPendingSleeps) {
  auto rt = test::make_runtime(GetParam());
  constexpr int kTimers = 100'000;
  std::atomic<int> ok{0};
  sched::test::Countdown done(kTimers);
  const auto deadline = Clock::now() + 200ms;
  for (int i = 0; i < kTimers; ++i)
    rt->spawn([](std::atomic<int>& o, sched::test::Countdown& d, Clock::time_point at,
                 int k) -> Task<void> {
        auto r = co_await sleep_until(at + std::chrono::microseconds(k % 1000));
        if (r && Clock::now() >= at) o.fetch_add(1);
        d.count_down();
      }(ok, done, deadline, i))
        .detach();
  ASSERT_TRUE(done.wait());
  EXPECT_EQ(ok.load(), kTimers);
  EXPECT_EQ(rt->engine().counters().timers, 0u);
}

TEST_P(TimerTest, WithTimeoutPassesResultsThroughAndTimesOutSlowTasks) {
  auto rt = test::make_runtime(GetParam());
  auto fast = []() -> Task<int> { co_return 5; };
  auto slow = []() -> Task<Result<void>> { co_return co_await sleep_for(1h); };
  auto body = [&]() -> Task<bool> {
    auto a = co_await with_timeout(1s, fast());
    if (!a || *a != 5) co_return false;
    const auto start = Clock::now();
    auto b = co_await with_timeout(10ms, slow());
    if (b || b.error() != std::errc::timed_out) co_return false;
    co_return Clock::now() - start < 1h;
  };
  EXPECT_TRUE(rt->block_on(body()));
}

TEST_P(TimerTest, StopCancelsAPendingSleepPromptly) {
  auto rt = test::make_runtime(GetParam());
  sched::test::Countdown started(1);
  auto h = rt->spawn([](sched::test::Countdown& s) -> Task<std::error_code> {
    s.count_down();
    auto r = co_await sleep_for(1h);
    co_return r.error();
  }(started));
  ASSERT_TRUE(started.wait());
  rt->request_stop();
  // join_blocking returns only when the sleep has ended: an hour unless cancellation works.
  EXPECT_EQ(h.join_blocking(), std::errc::operation_canceled);
}

TEST(Timer, SleepOutsideARuntimeIsAnError) {
  // A coroutine that is not an arbor task cannot find a runtime: clear error, no crash.
  auto body = []() -> Task<std::error_code> { co_return (co_await sleep_for(1ms)).error(); };
  auto task = body();
  auto handle = task.release();
  handle.resume();  // no context: runs synchronously to completion
  ASSERT_TRUE(handle.done());
  EXPECT_EQ(handle.promise().take(), Errc::not_in_runtime);
  handle.destroy();
}

INSTANTIATE_TEST_SUITE_P(Engines, TimerTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
