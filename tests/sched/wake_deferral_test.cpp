// The wake deferral never strands queued work behind a running item while a worker is free.
//
// A running item's first queued item may wake nobody until the item returns (its worker runs
// it next), but only for an item known to return soon after queueing (TailHistory, tested on
// its own in tail_history_test.cpp). These tests hold the other side of that rule: a parent that
// queues a child and then blocks until the child has run can only finish if another worker takes
// the child, so a deferral that is not bounded shows up as a failed bounded wait (never as a hang:
// the parent gives up and returns, and then its own worker runs the child). The other workers are
// parked before the child is queued, so no searcher can take it by luck: someone must be woken. No
// timing thresholds.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "arbor/sched/scheduler.hpp"
#include "test_support.hpp"

namespace arbor::sched {
namespace {

using test::Countdown;
using test::eventually;
using test::FnItem;

// Long enough that only a lost child (a deferral waiting for its parent) reaches it.
constexpr auto kChildLimit = std::chrono::seconds(20);

struct BlockedParentOutcome {
  bool others_parked = false;
  bool child_ran_while_parent_blocked = false;
  bool child_ran_elsewhere = false;
};

// One trial on `s`: the parent waits until every other worker is parked, queues `child`, then
// blocks on a futex until the child has run (bounded). The same items are reused across trials,
// so later trials run with whatever the scheduler learnt about the parent in earlier ones.
BlockedParentOutcome run_blocked_parent(Scheduler& s, bool prefer_local) {
  BlockedParentOutcome out;
  Countdown child_done(1), parent_done(1);
  std::thread::id parent_thread, child_thread;
  FnItem child([&](Disposition d) {
    if (d == Disposition::run) child_thread = std::this_thread::get_id();
    child_done.count_down();
  });
  FnItem parent([&](Disposition d) {
    if (d == Disposition::run) {
      parent_thread = std::this_thread::get_id();
      out.others_parked = eventually([&] { return s.parked_workers() == s.workers() - 1; });
      Scheduler::current()->submit(child, prefer_local);
      out.child_ran_while_parent_blocked = child_done.wait(kChildLimit);
    }
    parent_done.count_down();
  });
  EXPECT_TRUE(s.submit(parent));
  test::wait_or_exit(parent_done, "the parent");
  test::wait_or_exit(child_done, "the child");  // after the parent, at the latest
  out.child_ran_elsewhere = child_thread != parent_thread;
  return out;
}

TEST(WakeDeferral, ChildOfABlockedParentIsTakenByAnotherWorker) {
  for (int workers : {2, 4}) {
    for (bool prefer_local : {true, false}) {
      Scheduler s(SchedulerOptions{.workers = workers});
      // Several trials with the same parent address: the first finds it unknown, the later ones
      // find it known to keep running. Neither may defer.
      for (int trial = 0; trial < 5; ++trial) {
        const BlockedParentOutcome out = run_blocked_parent(s, prefer_local);
        SCOPED_TRACE(testing::Message() << workers << " workers, prefer_local=" << prefer_local
                                        << ", trial " << trial);
        EXPECT_TRUE(out.others_parked) << "the other workers never parked";
        EXPECT_TRUE(out.child_ran_while_parent_blocked)
            << "the child waited for its parent while other workers slept";
        EXPECT_TRUE(out.child_ran_elsewhere);
      }
      EXPECT_EQ(s.stop(), 0u);
    }
  }
}

// One worker: nobody else can take the child, so it runs on the same worker once the parent
// returns, whatever the parent's history says.
TEST(WakeDeferral, SingleWorkerRunsTheChildAfterTheParentReturns) {
  for (bool prefer_local : {true, false}) {
    Scheduler s(SchedulerOptions{.workers = 1});
    for (int trial = 0; trial < 20; ++trial) {
      Countdown done(1);
      std::atomic<bool> parent_returned{false};
      bool child_saw_parent_returned = false;
      std::thread::id parent_thread, child_thread;
      FnItem child([&](Disposition) {
        child_thread = std::this_thread::get_id();
        child_saw_parent_returned = parent_returned.load();
        done.count_down();
      });
      FnItem parent([&](Disposition) {
        parent_thread = std::this_thread::get_id();
        Scheduler::current()->submit(child, prefer_local);
        for (int k = 0; k < 1000; ++k)  // a tail: the child must not run inside it
          sync::cpu_relax();
        parent_returned = true;
      });
      ASSERT_TRUE(s.submit(parent));
      test::wait_or_exit(done, "the child");
      EXPECT_TRUE(child_saw_parent_returned) << "prefer_local=" << prefer_local;
      EXPECT_EQ(child_thread, parent_thread);
    }
    EXPECT_EQ(s.stop(), 0u);
  }
}

}  // namespace
}  // namespace arbor::sched
