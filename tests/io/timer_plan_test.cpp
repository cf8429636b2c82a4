// TimerPlan (io/src/common/timer_plan.hpp), driven as EngineCore::reap() drives it: before_wait()
// for every wait of the timer watcher, after_empty_wait() only for a wait planned towards a
// deadline that reaped nothing, reaped() for one that reaped something.
#include "common/timer_plan.hpp"  // private to io: tested from its source tree

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "arbor/io/clock.hpp"
#include "arbor/sched/scheduler.hpp"
#include "common/timer_queue.hpp"

namespace arbor::io {
namespace {

constexpr std::int64_t kHour = 3'600'000'000'000;

template <class F>
bool eventually(F&& condition) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

struct PausedClock {
  PausedClock() { paused = pause_clock(); }
  ~PausedClock() {
    if (paused) resume_clock();
  }
  bool paused;
};

// A watcher's empty wait, as reap() makes it; true if the clock jumped.
bool empty_wait(TimerPlan& plan, sched::Scheduler& sleepers, bool* planned_deadline = nullptr) {
  const TimerPlan::Wait w = plan.before_wait(-1, /*idle=*/true);
  if (planned_deadline != nullptr) *planned_deadline = w.deadline != TimerPlan::kNever;
  if (w.deadline == TimerPlan::kNever) return false;  // reap() asks nothing then
  return plan.after_empty_wait(w, [] { return true; }, w.paused ? &sleepers : nullptr);
}

// Every worker of `s` parked and registered on the semaphore (the nudge refuses one counted
// asleep but still on its way). A nudge of our own proves it: it succeeds only once every
// sleeper is on the semaphore, and once it is done they are back on it (a nudged waiter
// re-registers under the semaphore's lock before it counts as done).
void settle_parked(sched::Scheduler& s) {
  ASSERT_TRUE(eventually([&] { return s.parked_workers() == s.workers(); }));
  ASSERT_TRUE(eventually([&] { return s.nudge_sleepers(); }));
  ASSERT_TRUE(eventually([&] { return s.sleepers_nudged(); }));
}

// The plain round: the first quiet look arms, the second nudges, the first one after the
// sleepers are back jumps.
TEST(TimerPlan, APausedClockJumpsOnTheFirstQuietLookAfterTheNudgedAreBack) {
  PausedClock clock;
  ASSERT_TRUE(clock.paused);
  sched::Scheduler s(sched::SchedulerOptions{.workers = 2});
  settle_parked(s);
  TimerQueue q;
  TimerPlan plan(q);
  Timer t;
  t.deadline_ns = now_ns() + kHour;
  q.add(t);
  EXPECT_FALSE(empty_wait(plan, s)) << "jumped on the first quiet look";
  EXPECT_FALSE(empty_wait(plan, s)) << "jumped on the second, which nudges";
  ASSERT_TRUE(eventually([&] { return s.sleepers_nudged(); }));
  EXPECT_TRUE(empty_wait(plan, s));
  EXPECT_EQ(now_ns(), t.deadline_ns);
}

// A nudge's flags outlive a round that ended without a jump: the watcher's timer was cancelled
// (by a task an outside thread woke, between two of the watcher's waits), so its next waits
// have no deadline and reap() calls neither after_empty_wait() nor reaped(). The next sleep on
// the paused clock then jumps on its first quiet look, without the look a slice earlier and
// without nudging the sleepers (what the nudge was added for:
// BlockingRegionTest.APausedClockDoesNotJumpPastAPendingCompletion/uring).
TEST(TimerPlan, ANewDeadlineAfterACancelledRoundStartsOverAtTheFirstLook) {
  PausedClock clock;
  ASSERT_TRUE(clock.paused);
  sched::Scheduler s(sched::SchedulerOptions{.workers = 2});
  settle_parked(s);
  TimerQueue q;
  TimerPlan plan(q);
  Timer t1;
  t1.deadline_ns = now_ns() + kHour;
  q.add(t1);
  ASSERT_FALSE(empty_wait(plan, s));  // the first quiet look
  ASSERT_FALSE(empty_wait(plan, s));  // the second: nudges
  ASSERT_TRUE(eventually([&] { return s.sleepers_nudged(); }));
  // The sleep is cancelled before the watcher plans its next wait.
  ASSERT_TRUE(q.cancel(t1));
  bool planned_deadline = true;
  EXPECT_FALSE(empty_wait(plan, s, &planned_deadline));
  ASSERT_FALSE(planned_deadline);
  // Later a task sleeps an hour on the paused clock again.
  Timer t2;
  t2.deadline_ns = now_ns() + kHour;
  q.add(t2);
  const std::int64_t before = now_ns();
  const TimerPlan::Wait w = plan.before_wait(-1, /*idle=*/true);
  EXPECT_EQ(w.timeout_ns, 0) << "the first look of a round is made without waiting";
  EXPECT_FALSE(plan.after_empty_wait(w, [] { return true; }, &s))
      << "jumped on the first quiet look of a new round, without nudging the sleepers";
  EXPECT_EQ(now_ns(), before);
}

}  // namespace
}  // namespace arbor::io
