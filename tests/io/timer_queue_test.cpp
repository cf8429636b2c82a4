#include "common/timer_queue.hpp"  // private to io: tested from its source tree

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace arbor::io {
namespace {

TEST(TimerQueue, PopsInDeadlineOrderAndOnlyExpired) {
  TimerQueue q;
  std::vector<Timer> timers(1000);
  std::mt19937 rng(7);
  for (auto& t : timers) {
    t.deadline_ns = std::uniform_int_distribution<std::int64_t>(1, 1'000'000)(rng);
    q.add(t);
  }
  EXPECT_EQ(q.size(), 1000u);
  Timer* out[64];
  std::int64_t last = 0;
  std::size_t total = 0;
  for (std::int64_t now = 0; now <= 1'000'000; now += 50'000) {
    std::size_t n;
    while ((n = q.pop_expired(now, out, 64)) > 0) {
      for (std::size_t i = 0; i < n; ++i) {
        EXPECT_LE(out[i]->deadline_ns, now);
        EXPECT_GE(out[i]->deadline_ns, last);
        last = out[i]->deadline_ns;
        EXPECT_EQ(out[i]->heap_index, Timer::kNotQueued);
      }
      total += n;
    }
    EXPECT_TRUE(q.size() == 0 || q.arm() > now);
  }
  EXPECT_EQ(total, 1000u);
}

TEST(TimerQueue, CancelRemovesFromAnywhereAndBlocksLaterAdd) {
  TimerQueue q;
  std::vector<Timer> timers(100);
  for (std::size_t i = 0; i < timers.size(); ++i) {
    timers[i].deadline_ns = static_cast<std::int64_t>((i * 37) % 100);
    q.add(timers[i]);
  }
  for (std::size_t i = 0; i < timers.size(); i += 3)
    EXPECT_TRUE(q.cancel(timers[i]));
  EXPECT_FALSE(q.cancel(timers[0]));  // already out
  Timer* out[100];
  const std::size_t n = q.pop_expired(1000, out, 100);
  EXPECT_EQ(n, 100u - 34u);
  EXPECT_TRUE(std::is_sorted(out, out + n,
                             [](Timer* a, Timer* b) { return a->deadline_ns < b->deadline_ns; }));
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_FALSE(out[i]->cancelled);

  Timer late;
  late.deadline_ns = 5;
  EXPECT_FALSE(q.cancel(late));                          // cancelled before it was ever added...
  EXPECT_EQ(q.add(late), TimerQueue::Added::cancelled);  // ...so it never fires
  EXPECT_EQ(q.size(), 0u);
}

TEST(TimerQueue, AddReportsWhenThePollerMustReArm) {
  TimerQueue q;
  Timer a, b, c;
  a.deadline_ns = 100;
  b.deadline_ns = 200;
  c.deadline_ns = 50;
  EXPECT_EQ(q.arm(), INT64_MAX);
  EXPECT_EQ(q.add(a), TimerQueue::Added::queued_earliest);
  EXPECT_EQ(q.add(b), TimerQueue::Added::queued);  // later than what is armed
  EXPECT_EQ(q.add(c), TimerQueue::Added::queued_earliest);
  EXPECT_EQ(q.arm(), 50);
}

TEST(TimerQueue, HundredThousandTimers) {
  TimerQueue q;
  std::vector<Timer> timers(100'000);
  std::mt19937 rng(1);
  for (auto& t : timers) {
    t.deadline_ns = std::uniform_int_distribution<std::int64_t>(0, 1'000'000'000)(rng);
    q.add(t);
  }
  for (std::size_t i = 0; i < timers.size(); i += 2)
    q.cancel(timers[i]);
  EXPECT_EQ(q.size(), 50'000u);
  std::vector<Timer*> out(4096);
  std::size_t total = 0;
  std::int64_t last = -1;
  for (std::size_t n; (n = q.pop_expired(INT64_MAX, out.data(), out.size())) > 0; total += n)
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_GE(out[i]->deadline_ns, last);
      last = out[i]->deadline_ns;
    }
  EXPECT_EQ(total, 50'000u);
}

}  // namespace
}  // namespace arbor::io
