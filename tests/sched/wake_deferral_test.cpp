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
#include "arbor/sched/test_hooks.hpp"
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

// The interleaving behind a rare failure of the test above on a loaded machine, made
// deterministic: the parent's first run (unknown, so a helper is woken) loses its core right
// after the wake, before its tail clock starts; the woken worker takes and runs the child
// meanwhile; the parent then finds the child done and returns at once. That tail is short only
// because another worker ran the child, and must not count as evidence that the parent returns
// soon by itself: if it did, the parent's next run on that worker would defer the child's wake
// and strand it while the others sleep. The hook holds the parent where the preemption did.
namespace held_at_tail_clock {
std::atomic<Countdown*> child_done{nullptr};
void hold() {
  if (Countdown* c = child_done.load()) c->wait(kChildLimit);
}
}  // namespace held_at_tail_clock

TEST(WakeDeferral, ATailShortenedByAnotherWorkerIsNoEvidence) {
  for (bool prefer_local : {true, false}) {
    Scheduler s(SchedulerOptions{.workers = 2});
    test_hooks::set_tail_clock_start(&held_at_tail_clock::hold);
    // With two workers, by the third trial the parent runs on a worker that timed it before.
    for (int trial = 0; trial < 4; ++trial) {
      Countdown child_done(1);
      std::atomic<bool> parent_returned{false};
      bool others_parked = false, child_ran_while_parent_blocked = false;
      FnItem child([&](Disposition) { child_done.count_down(); });
      FnItem parent([&](Disposition d) {
        if (d == Disposition::run) {
          others_parked = eventually([&] { return s.parked_workers() == s.workers() - 1; });
          held_at_tail_clock::child_done = &child_done;
          Scheduler::current()->submit(child, prefer_local);
          held_at_tail_clock::child_done = nullptr;
          // No system call from here to the return: the tail is as short as a tail gets.
          child_ran_while_parent_blocked = child_done.wait(kChildLimit);
        }
        parent_returned = true;
      });
      ASSERT_TRUE(s.submit(parent));
      ASSERT_TRUE(eventually([&] { return parent_returned.load(); }));
      test::wait_or_exit(child_done, "the child");
      SCOPED_TRACE(testing::Message() << "prefer_local=" << prefer_local << ", trial " << trial);
      EXPECT_TRUE(others_parked);
      EXPECT_TRUE(child_ran_while_parent_blocked)
          << "a tail another worker shortened was taken as evidence for a deferral";
    }
    test_hooks::set_tail_clock_start(nullptr);
    EXPECT_EQ(s.stop(), 0u);
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
