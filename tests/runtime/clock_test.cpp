// The paused test clock (TestClock) and Interval. With the clock paused, a runtime with
// nothing left to do but wait for a timer jumps the clock to that timer's deadline, so these
// tests wait for hours of timers in no real time. What they check is exact on that clock:
// a timer completes at its deadline, not before and not after time has moved past it.
#include "arbor/io/clock.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "arbor/arbor.hpp"
#include "gate.hpp"
#include "runtime_support.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;

TEST(TestClockApi, AdvanceMovesTheClockByExactlyThatMuch) {
  TestClock clock;
  const auto start = clock.now();
  EXPECT_EQ(Clock::now(), start);  // paused: no runtime to move it
  clock.advance(5s);
  EXPECT_EQ(Clock::now() - start, 5s);
  clock.advance(0s);
  EXPECT_EQ(Clock::now() - start, 5s);
  EXPECT_THROW(clock.advance(-1ns), std::invalid_argument);
  EXPECT_EQ(Clock::now() - start, 5s);
}

TEST(TestClockApi, OnlyOneAtATimeAndTimeNeverGoesBack) {
  Clock::time_point left;
  {
    TestClock clock;
    EXPECT_THROW(TestClock{}, std::logic_error);
    clock.advance(1h);
    left = Clock::now();
  }
  // Running again, from where the test left it: an hour ahead of steady_clock, never back.
  EXPECT_GE(Clock::now(), left);
  TestClock again;  // the first one's end released the clock
  EXPECT_GE(Clock::now(), left);
}

// Advancing past time_point::max() wrapped the clock round to before the epoch: every
// deadline was then in the future for ages, and after ~TestClock the running clock too.
TEST(TestClockApi, AnAdvancePastTheEndOfTimeIsRefusedAndTheClockStays) {
  TestClock clock;
  clock.advance(1h);
  const auto before = clock.now();
  EXPECT_THROW(clock.advance(Clock::duration::max()), std::overflow_error);
  EXPECT_EQ(Clock::now(), before);
  clock.advance(1s);  // still usable
  EXPECT_EQ(Clock::now() - before, 1s);
}

// An engine jumps the paused clock (io::advance_clock_to, EngineCore::reap) whenever its runtime is
// idle, on its own thread, while the test's thread may be ending its TestClock. The resume
// computed its offset from the value it read before the jump landed, and so undid the jump: the
// clock went back to before deadlines that had fired. Here a thread jumps as an engine does,
// 1 ms ahead each time, while the clock resumes; whatever jump succeeded must still hold after.
TEST(TestClockApi, AJumpRacingTheResumeIsNotUndone) {
  int undone = 0;
  for (int i = 0; i < 300; ++i) {  // undid about one in five before the fix
    std::optional<TestClock> clock(std::in_place);
    std::atomic<bool> jumping{false};
    std::atomic<std::int64_t> reached{0};  // the latest value a jump set
    std::thread engine([&] {
      for (;;) {
        const std::int64_t to = io::now_ns() + 1'000'000;
        jumping.store(true, std::memory_order_release);
        if (!io::advance_clock_to(to)) break;  // running again
        reached.store(to, std::memory_order_release);
      }
    });
    while (!jumping.load(std::memory_order_acquire))
      std::this_thread::yield();
    clock.reset();  // resumes while the other thread jumps
    engine.join();
    if (io::now_ns() < reached.load(std::memory_order_acquire)) ++undone;
  }
  EXPECT_EQ(undone, 0);
}

// A TestClock may be made while something reads the clock (a runtime's engine, a task). The
// pause took the paused value and then published it: a reader in between read a later time,
// and then the paused one, earlier. So a timer could fire and its task wake to a clock before
// its deadline. A reader checks every read against its previous one while the clock is paused
// and resumed again and again.
TEST(TestClockApi, NeverBackwardsWhileReadersRacePauseAndResume) {
  std::atomic<bool> stop{false};
  std::atomic<bool> reading{false};
  long backwards = 0;
  std::thread reader([&] {
    Clock::time_point last = Clock::now();
    reading.store(true, std::memory_order_release);
    while (!stop.load(std::memory_order_acquire)) {
      const Clock::time_point t = Clock::now();
      if (t < last) ++backwards;
      last = t;
    }
  });
  while (!reading.load(std::memory_order_acquire))
    std::this_thread::yield();
  for (int i = 0; i < 200000; ++i) {
    TestClock clock;
    if (i % 2 == 0) clock.advance(1ns);
  }
  stop.store(true, std::memory_order_release);
  reader.join();
  EXPECT_EQ(backwards, 0);
}

class TestClockTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TestClockTest, AnHourLongTimeoutFiresWithoutWaitingForIt) {
  TestClock clock;
  auto rt = test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  test::Gate never;
  auto body = [&]() -> Task<Result<void>> { co_return co_await with_timeout(1h, never.wait()); };
  const auto start = Clock::now();
  auto r = rt->block_on(body());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::timed_out);
  EXPECT_GE(Clock::now() - start, 1h);  // never before its deadline
}

// Each sleeper records the clock when it wakes: exactly its deadline, since the clock jumps
// only when no task is left to run, and a woken sleeper is one.
TEST_P(TestClockTest, SleepsWakeExactlyAtTheirDeadlinesInOrder) {
  TestClock clock;
  auto rt = test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  const auto start = Clock::now();
  std::mutex mutex;
  std::vector<std::pair<Clock::duration, Clock::duration>> woke;  // deadline, woke at
  auto sleeper = [&](Clock::duration d) -> Task<void> {
    auto r = co_await sleep_until(start + d);
    const auto at = Clock::now() - start;
    EXPECT_TRUE(r);
    std::lock_guard lock(mutex);
    woke.emplace_back(d, at);
  };
  auto body = [&]() -> Task<void> {
    std::vector<Task<void>> tasks;
    for (int minutes : {7, 3, 59, 1, 30, 3, 12, 120, 45, 2})
      tasks.push_back(sleeper(std::chrono::minutes(minutes)));
    co_await when_all(std::move(tasks));
  };
  rt->block_on(body());
  ASSERT_EQ(woke.size(), 10u);
  for (const auto& [deadline, at] : woke)
    EXPECT_EQ(at, deadline);
  EXPECT_TRUE(std::is_sorted(woke.begin(), woke.end()));
}

// A chain of dependent sleeps: each deadline exists only once the previous one has fired.
TEST_P(TestClockTest, AThousandSequentialSleepsOfAnHourEach) {
  TestClock clock;
  auto rt = test::make_runtime(GetParam(), 1);
  ASSERT_TRUE(rt);
  auto body = []() -> Task<bool> {
    const auto start = Clock::now();
    for (int i = 1; i <= 1000; ++i) {
      if (!co_await sleep_for(1h)) co_return false;
      if (Clock::now() - start != i * 1h) co_return false;
    }
    co_return true;
  };
  EXPECT_TRUE(rt->block_on(body()));
}

// A task that keeps yielding keeps the runtime busy, so the clock cannot jump by itself: only
// advance() can wake the sleeper, and it does (a hang here means it did not).
TEST_P(TestClockTest, AdvanceFiresWhatIsDueWhileTheRuntimeIsBusy) {
  TestClock clock;
  auto rt = test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  std::atomic<bool> woke{false};
  auto body = [&]() -> Task<bool> {
    const auto start = Clock::now();
    auto sleeper = [&]() -> Task<Clock::duration> {
      co_await sleep_until(start + 10s);
      woke.store(true);
      co_return Clock::now() - start;
    };
    auto busy = [&]() -> Task<int> {
      clock.advance(4s);
      clock.advance(6s);
      int yields = 0;
      while (!woke.load()) {
        co_await yield();
        ++yields;
      }
      co_return yields;
    };
    auto [slept, _] = co_await when_all(sleeper(), busy());
    co_return slept == 10s && Clock::now() - start == 10s;
  };
  EXPECT_TRUE(rt->block_on(body()));
}

TEST_P(TestClockTest, IntervalBurstCatchesUpOnMissedTicks) {
  TestClock clock;
  auto rt = test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  auto body = [&]() -> Task<std::vector<Clock::duration>> {
    const auto start = Clock::now();
    Interval ticks = interval(10ms);  // MissedTicks::burst
    std::vector<Clock::duration> at;
    for (int i = 0; i < 2; ++i)
      at.push_back(*co_await ticks.tick() - start);
    clock.advance(35ms);  // busy for 35 ms: now start + 45 ms; ticks at 20, 30, 40 missed
    for (int i = 0; i < 4; ++i)
      at.push_back(*co_await ticks.tick() - start);
    at.push_back(Clock::now() - start);
    co_return at;
  };
  const std::vector<Clock::duration> expected = {0ms, 10ms, 20ms, 30ms, 40ms, 50ms, 50ms};
  EXPECT_EQ(rt->block_on(body()), expected);
}

TEST_P(TestClockTest, IntervalDelayStartsAgainAndSkipKeepsTheGrid) {
  TestClock clock;
  auto rt = test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  auto run = [&](MissedTicks missed) -> Task<std::vector<Clock::duration>> {
    const auto start = Clock::now();
    Interval ticks(start, 10ms, missed);
    std::vector<Clock::duration> at;
    for (int i = 0; i < 2; ++i)
      at.push_back(*co_await ticks.tick() - start);
    clock.advance(35ms);  // now start + 45 ms
    for (int i = 0; i < 3; ++i)
      at.push_back(*co_await ticks.tick() - start);
    co_return at;
  };
  // The late tick (20) completes at once; then delay: 45 + 10, 65; skip: the grid's 50, 60.
  const std::vector<Clock::duration> delay = {0ms, 10ms, 20ms, 55ms, 65ms};
  const std::vector<Clock::duration> skip = {0ms, 10ms, 20ms, 50ms, 60ms};
  EXPECT_EQ(rt->block_on(run(MissedTicks::delay)), delay);
  EXPECT_EQ(rt->block_on(run(MissedTicks::skip)), skip);
}

TEST_P(TestClockTest, ACancelledTickIsNotTaken) {
  TestClock clock;
  auto rt = test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  auto body = [&]() -> Task<bool> {
    const auto start = Clock::now();
    Interval ticks(start + 10ms, 10ms);
    auto early = co_await with_timeout(5ms, ticks.tick());
    if (early || early.error() != std::errc::timed_out) co_return false;
    if (Clock::now() - start != 5ms) co_return false;
    auto tick = co_await ticks.tick();  // the one the timeout interrupted
    co_return tick.has_value() && *tick - start == 10ms && ticks.next() - start == 20ms;
  };
  EXPECT_TRUE(rt->block_on(body()));
}

TEST_P(TestClockTest, AnIntervalOfTheLongestPeriodTicksOnceAndThenWaits) {
  TestClock clock;
  auto rt = test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  auto body = [&]() -> Task<bool> {
    Interval ticks = interval(Clock::duration::max());
    if (!co_await ticks.tick()) co_return false;                    // the first, now
    if (ticks.next() != Clock::time_point::max()) co_return false;  // saturated, no overflow
    auto second = co_await with_timeout(24h, ticks.tick());
    co_return !second && second.error() == std::errc::timed_out;
  };
  EXPECT_TRUE(rt->block_on(body()));
}

// sleep_for and with_timeout added the duration to Clock::now() unchecked: one past the end of
// time wrapped to a deadline long gone, so "forever" ended at once (a sleep) or timed out at
// once (a timeout). Saturated, it is a deadline that never comes.
TEST_P(TestClockTest, TheLongestDurationsNeverFireInsteadOfFiringAtOnce) {
  TestClock clock;
  auto rt = test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  auto body = [&]() -> Task<void> {
    const auto start = Clock::now();
    auto slept = co_await with_timeout(Clock::duration::max(), sleep_for(1h));
    EXPECT_TRUE(slept);  // the sleep ended, not the timeout
    EXPECT_GE(Clock::now() - start, 1h);
    auto hours = co_await with_timeout(std::chrono::hours::max(), sleep_for(1h));
    EXPECT_TRUE(hours);
    EXPECT_GE(Clock::now() - start, 2h);
    auto forever = co_await with_timeout(1h, sleep_for(Clock::duration::max()));
    EXPECT_FALSE(forever);  // the sleep never ends: the timeout cuts it
    if (!forever) {
      EXPECT_EQ(forever.error(), std::errc::timed_out);
    }
    EXPECT_GE(Clock::now() - start, 3h);
  };
  rt->block_on(body());
}

// The other end, on the real clock: a deadline at time_point::min() is long past, but the
// engine measured the wait towards it as deadline - now, which wrapped to centuries, and slept.
TEST_P(TestClockTest, ATimeoutAtTheStartOfTimeFiresAtOnceOnTheRealClock) {
  auto rt = test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  test::Gate never;
  auto body = [&]() -> Task<Result<void>> {
    co_return co_await with_timeout(Clock::time_point::min(), never.wait());
  };
  auto r = rt->block_on(body());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::timed_out);
}

TEST_P(TestClockTest, AnIntervalStartingBeforeTheEpochKeepsItsGrid) {
  TestClock clock;
  auto rt = test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  auto body = [&]() -> Task<bool> {
    const Clock::time_point start = Clock::time_point{} - 1h;  // before steady_clock's epoch
    Interval ticks(start, 1h, MissedTicks::skip);
    auto first = co_await ticks.tick();
    if (!first || *first != start) co_return false;
    // skip: the grid's first point after now, less than a period ahead (not the end of time)
    co_return ticks.next() > Clock::now() && ticks.next() - Clock::now() <= 1h &&
        (ticks.next() - start) % 1h == Clock::duration::zero();
  };
  EXPECT_TRUE(rt->block_on(body()));
}

INSTANTIATE_TEST_SUITE_P(Engines, TestClockTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

TEST(Interval, APeriodThatIsNotPositiveIsRefused) {
  EXPECT_THROW(interval(0ms), std::invalid_argument);
  EXPECT_THROW(Interval(Clock::now(), -1ms), std::invalid_argument);
}

}  // namespace
}  // namespace arbor
